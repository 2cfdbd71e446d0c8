#!/usr/bin/env bash
# CI: start a real single-node Slurm (munged, slurmctld, slurmd from the distribution's packages,
# state and config in a temp dir) and run the shipped recipe deploy/slurm/ on the simulated rig
# as an unprivileged user, through a real sudo with the sudoers rule deploy/slurm/README.md
# documents, with every node's settings in a simulated-state file and its restore journal:
#   - the whole-fleet --dry-run plan (which GPUs each node would sweep);
#   - six nodes (one planted hot card, one whose server fails), the report, and fleet apply
#     --dry-run on every node;
#   - a job scancel'd while it sweeps: limits put back by powersweep's SIGTERM handling, the
#     report of what finished still written;
#   - a job whose time limit expires (the recipe's --signal lead), with one node SIGKILLed
#     meanwhile: the others restore on SIGTERM, epilog.sh restores the killed one.
# Each simulated card starts at the user's own limit (400 W, not the 450 W default), which must
# be what its state file says at the end. It FAILS, never skips, when Slurm cannot start.
# Needs root (daemons, packages, the CI user and its sudoers rule).
#
#   bash scripts/ci_slurm.sh            # uses ./.venv/bin/powersweep
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
fail() { echo "ci_slurm: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "needs root to start munged, slurmctld and slurmd"
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null \
    || ! command -v sudo >/dev/null; then
    echo "== installing slurm-wlm, munge and sudo"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge sudo >/dev/null \
        || fail "cannot install slurm-wlm, munge and sudo"
fi
bin="$repo/.venv/bin"
[ -x "$bin/powersweep" ] || fail "no $bin/powersweep; install the package first"

tmp=$(mktemp -d /tmp/ci-slurm.XXXXXX)
# the CI user reads the config and the recipe's outputs: the folder is traversable, its
# secrets (munge key, daemon state) are not
chmod 755 "$tmp"
host=$(hostname -s)
# ports, user and group of this run only, so a second CI on the same machine does not collide.
# Two neighbouring ports that bind now, below the kernel's ephemeral range (a port inside it can
# be taken by any outgoing connection: slurmctld once failed with "Address already in use").
port=$("$bin/python" - "$$" <<'PY'
import socket, sys
with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
    ephemeral_lo = int(f.read().split()[0])
lo, hi = 20000, min(ephemeral_lo, 65535) - 2
span = (hi - lo) // 2
for k in range(span):
    p = lo + 2 * ((int(sys.argv[1]) + k) % span)
    try:
        for q in (p, p + 1):
            with socket.socket() as s:
                s.bind(("", q))
    except OSError:
        continue
    print(p)
    break
else:
    sys.exit("no two free ports below the ephemeral range")
PY
) || fail "no free port pair for slurmctld and slurmd"
ciuser="psci$$"
cigroup="psadm$$"
rule="/etc/sudoers.d/powersweep-ci-$$"
stop() {
    set +e
    scancel --quiet --full -u "$ciuser" 2>/dev/null
    scancel --quiet --full -u root 2>/dev/null
    local daemons=()
    for f in "$tmp"/slurmd.pid "$tmp"/slurmctld.pid "$tmp"/munged.pid; do
        [ -f "$f" ] && daemons+=("$(cat "$f")")
    done
    for p in "${daemons[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
    # wait for them to go, so the next run (or the temp dir's removal) does not race them
    for _ in $(seq 20); do
        alive=0
        for p in "${daemons[@]:-}"; do [ -n "$p" ] && kill -0 "$p" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.5
    done
    rm -f "$rule"
    id "$ciuser" >/dev/null 2>&1 && userdel "$ciuser"
    getent group "$cigroup" >/dev/null && groupdel "$cigroup"
    [ -n "${KEEP_CI_SLURM:-}" ] || rm -rf "$tmp"
}
trap stop EXIT

echo "== CI user $ciuser in group $cigroup, sudoers rule $rule"
groupadd "$cigroup"
useradd -M -N -g "$cigroup" -d "$tmp/home" -s /bin/bash "$ciuser"
mkdir -p "$tmp/home" "$tmp/work" "$tmp/out" "$tmp/simstate" "$tmp/bin"
chown "$ciuser:$cigroup" "$tmp/home" "$tmp/work" "$tmp/out" "$tmp/simstate"
# The powersweep the rule allows: a root-owned wrapper (the rule names one absolute path, as
# /usr/local/bin/powersweep in the README) that plants a hot card on node r1 and makes node r4's
# server answer every request with HTTP 500, so that node fails mid-sweep (its limits must still
# be restored). sudo resets the environment, so it reads the node from --sim-node.
cat > "$tmp/bin/powersweep" <<WRAP
#!/usr/bin/env bash
args=("\$@")
node=""
for ((i = 0; i < \${#args[@]}; i++)); do
    [ "\${args[i]}" = --sim-node ] && node="\${args[i + 1]:-}"
done
[ "\${args[0]:-}" = sweep ] && case "\$node" in
  *-r1) args=("\${args[@]/rtx4090-air~0.03/rtx4090-air~0.03~hot}") ;;
  *-r4) args+=(--sim-http-error 500 --max-failed-caps 1) ;;
esac
exec "$bin/powersweep" "\${args[@]}"
WRAP
chmod 755 "$tmp/bin" "$tmp/bin/powersweep"
# the rule exactly as deploy/slurm/README.md documents it, with this run's group and path
echo "%$cigroup ALL=(root) NOPASSWD: $tmp/bin/powersweep" > "$rule"
chmod 440 "$rule"
visudo -c -f "$rule" >/dev/null || fail "visudo rejects $rule"
visudo -c >/dev/null || fail "visudo -c fails with $rule installed"
as_user() { runuser -u "$ciuser" -- env HOME="$tmp/home" SLURM_CONF="$tmp/slurm.conf" "$@"; }
as_user sudo -n "$tmp/bin/powersweep" --version >/dev/null \
    || fail "the documented sudo rule does not let $ciuser run powersweep"
# what node.sh did before: --preserve-env needs a SETENV rule, which the README does not give
if as_user POWERSWEEP_STATE_DIR="$tmp/journal" sudo -n --preserve-env=POWERSWEEP_STATE_DIR \
    "$tmp/bin/powersweep" --version \
    >/dev/null 2>&1; then
    fail "sudo --preserve-env passed without a SETENV rule: this is not the documented set-up"
fi
if as_user sudo -n /bin/true 2>/dev/null; then fail "the rule lets $ciuser run more than powersweep"; fi

echo "== munge ($tmp)"
mkdir -p "$tmp/munge" "$tmp/munge-run" "$tmp/state" "$tmp/spool"
chmod 700 "$tmp/munge" "$tmp/state" "$tmp/spool"
chmod 755 "$tmp/munge-run"
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge/munge.key"
munged --force --key-file="$tmp/munge/munge.key" --socket="$tmp/munge-run/munge.sock" \
    --pid-file="$tmp/munged.pid" --log-file="$tmp/munge/munged.log" \
    --seed-file="$tmp/munge/munged.seed" || fail "munged did not start"

# The epilog (root, after every job): deploy/slurm/epilog.sh once per simulated node's state
# directory (one real node has one; six simulated ones on this machine have six).
cat > "$tmp/epilog-ci.sh" <<EPI
#!/usr/bin/env bash
for d in "$tmp"/journal/*/; do
    [ -d "\$d" ] || continue
    POWERSWEEP_STATE_DIR="\$d" POWERSWEEP_BIN="$tmp/bin/powersweep" \\
        POWERSWEEP_EPILOG_LOG="$tmp/epilog.log" "$repo/deploy/slurm/epilog.sh"
done
exit 0
EPI
chmod 755 "$tmp/epilog-ci.sh"

# Simulated nodes are light: the one real node claims 16 CPUs so that six of them fit on it.
cpus=16
cat > "$tmp/slurm.conf" <<CONF
ClusterName=powersweep-ci
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge-run/munge.sock
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=30
Epilog=$tmp/epilog-ci.sh
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
chmod 644 "$tmp/slurm.conf"
export SLURM_CONF="$tmp/slurm.conf"

echo "== slurmctld, slurmd"
slurmctld -i -f "$SLURM_CONF" || fail "slurmctld did not start: $(tail -5 "$tmp/slurmctld.log")"
slurmd -f "$SLURM_CONF" || fail "slurmd did not start: $(tail -5 "$tmp/slurmd.log" 2>/dev/null)"
for _ in $(seq 60); do
    state=$(sinfo -h -o %T 2>/dev/null | head -1 || true)
    [ "$state" = idle ] && break
    sleep 1
done
[ "$state" = idle ] || fail "the node never became idle (state '$state'): $(tail -5 "$tmp/slurmctld.log")"

# The user's own limit on every simulated card, in the state file of its node.
USER_LIMIT_W=400
simstates() {  # JOB_NAME N: fresh state files for N nodes of a job
    local r
    for ((r = 0; r < $2; r++)); do
        echo "{\"GPU-sim-rtx4090-air-0\": $USER_LIMIT_W.0}" > "$tmp/simstate/$1-$host-r$r.json"
    done
    chown "$ciuser:$cigroup" "$tmp"/simstate/"$1"-*.json
}
# Everything a job's user passes; `{host}`, `{rank}` and `{node}` are filled in per node by the
# recipe (as in --url 'http://{host}:8080'), POWERSWEEP_STATE_DIR too.
submit_env=(POWERSWEEP_BIN="$tmp/bin/powersweep" POWERSWEEP_SUDO=1
    POWERSWEEP_FLEET_OUT="$tmp/out" POWERSWEEP_SLURM_DIR="$repo/deploy/slurm"
    POWERSWEEP_STATE_DIR="$tmp/journal/{node}")
sim_args() {  # JOB_NAME: the simulated rig of each node of that job
    echo --simulate 'rtx4090-air~0.03' --cooling air --load-mode decode-single --no-charts \
        --sim-node '{host}-r{rank}' --sim-state "$tmp/simstate/$1-{host}-r{rank}.json"
}
# the simulated rig's virtual time: each sweep takes the seconds its CPU needs
fast=(--caps 240,280,320,400,480 --target-cap-seconds 2 --settle fixed --settle-seconds 1)
# long sweeps, stopped part-way by scancel or the time limit: virtual time paced to the wall
# (about 2 minutes: longer than the time-limit job's first 80 s, so its SIGTERM stops them)
slow=(--caps 480,440,400,360,320,280,240,200,160 --target-cap-seconds 6 --settle fixed
    --settle-seconds 1 --sim-pace 1)
recipe="$repo/deploy/slurm/powersweep-fleet.sbatch"
job_of() { sed -n 's/^Submitted batch job \([0-9]*\).*/\1/p' "$1"; }
wait_gone() {  # JOB_ID SECONDS
    for _ in $(seq "$2"); do
        squeue -h -j "$1" 2>/dev/null | grep -q . || return 0
        sleep 1
    done
    fail "job $1 still runs after $2 s"
}
rows() { if [ -f "$1" ]; then tail -n +2 "$1" | grep -c . || true; else echo 0; fi; }
check_restored() {  # JOB_NAME NODE...: the user's own limit back, no journal left
    local name=$1 r
    shift
    "$bin/python" - "$tmp" "$name" "$host" "$USER_LIMIT_W" "$@" <<'PY'
import json, sys
from pathlib import Path
tmp, name, host, limit, ranks = Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5:]
for r in ranks:
    state = json.loads((tmp / "simstate" / f"{name}-{host}-r{r}.json").read_text())
    got = state.get("GPU-sim-rtx4090-air-0")
    if got != limit:
        sys.exit(f"ci_slurm: FAIL: {name} node r{r}: limit {got} W, not the user's {limit:g} W")
    journal = tmp / "journal" / f"{host}-{r}" / "journal.json"
    if journal.exists():
        sys.exit(f"ci_slurm: FAIL: {name} node r{r}: restore journal left: {journal.read_text()}")
print(f"ci_slurm: {name}: limits restored to {limit:g} W on nodes {', '.join(ranks)}")
PY
}

echo "== sbatch: whole-fleet plan (--dry-run), as $ciuser through sudo"
simstates plan 6
set +e
# shellcheck disable=SC2046
as_user "${submit_env[@]}" sbatch --wait --chdir "$tmp/work" -J plan --ntasks-per-node=6 \
    "$recipe" $(sim_args plan) "${fast[@]}" --dry-run > "$tmp/plan-submit.txt"
rc=$?
set -e
[ "$rc" -eq 0 ] || fail "dry-run job exit $rc: $(cat "$tmp"/work/powersweep-fleet-*.log)"
plan=$(ls "$tmp"/out/plan-*/plan.txt)
[ "$(grep -c '^== ' "$plan")" -eq 6 ] || fail "plan.txt has not 6 nodes: $(cat "$plan")"
grep -q "caps" "$plan" || fail "plan.txt holds no caps"
[ "$(grep -c '^#   .*: [0-9]' "$plan")" -eq 6 ] || fail "plan.txt lacks the per-node estimates: $(head -9 "$plan")"
[ "$(grep -c '^#   .*: GPUs 0 (the only GPU)' "$plan")" -eq 6 ] \
    || fail "plan.txt does not say which GPUs each node sweeps: $(head -20 "$plan")"
grep -q "requested no GPUs" "$tmp"/work/powersweep-fleet-*.log \
    || fail "the job log does not warn that no GPUs were requested"

echo "== sbatch: the fleet sweep (6 nodes, one fails), then fleet apply --dry-run on each"
simstates fleet 6
set +e
# shellcheck disable=SC2046
as_user "${submit_env[@]}" POWERSWEEP_FLEET_APPLY=dry-run \
    POWERSWEEP_FLEET_APPLY_ARGS="--simulate rtx4090-air~0.03 --sim-node {host}-r{rank} --sim-state $tmp/simstate/fleet-{host}-r{rank}.json" \
    sbatch --wait --chdir "$tmp/work" -J fleet --ntasks-per-node=6 "$recipe" \
    $(sim_args fleet) "${fast[@]}" > "$tmp/fleet-submit.txt"
rc=$?
set -e
log="$tmp/work/powersweep-fleet-$(job_of "$tmp/fleet-submit.txt").log"
cat "$log"
[ "$rc" -eq 3 ] || fail "the job should end with 3 (one node failed), got $rc"
out=$(ls -d "$tmp"/out/fleet-*)
"$bin/python" - "$out" "$host" <<'PY'
import json, sys
from pathlib import Path
out, host = Path(sys.argv[1]), sys.argv[2]
def check(cond, msg):
    if not cond:
        sys.exit(f"ci_slurm: FAIL: {msg}")
status = {d.name: (d / "status").read_text().strip() for d in (out / "nodes").iterdir()}
check(len(status) == 6, f"6 node folders expected: {status}")
check(status.pop(f"{host}-4") == "failed" and set(status.values()) == {"ok"}, f"statuses {status}")
failed_run = next((out / "nodes" / f"{host}-4").glob("*/run.json"))
meta = json.loads(failed_run.read_text())
check(meta["status"] == "failed", f"failed node's run.json status {meta['status']}")
check(meta["restored"] and all(r["ok"] for r in meta["restored"]), f"restored {meta['restored']}")
for run in (out / "nodes").glob("*/*/run.json"):
    check(json.loads(run.read_text())["simulation"]["seed"] is not None, f"{run}")
fleet = json.loads((out / "report" / "fleet.json").read_text())
(group,) = fleet["groups"]
check(group["n_cards"] >= 5, f"cards in the group: {group['n_cards']}")
nodes = {c["label"] for c in group["cards"]}
check({f"{host}-r{r}" for r in (0, 1, 2, 3, 5)} <= nodes, f"cards {nodes}")
hot = {o["label"]: o["causes"][0]["code"] for o in group["outliers"]}
check(hot.get(f"{host}-r1") == "hot", f"planted hot card not named: {hot}")
check(220 <= group["fleet_cap"]["cap_w"] <= 400, f"fleet cap {group['fleet_cap']}")
md = (out / "report" / "fleet.md").read_text()
check("hot card" in md and "MWh/year" in md, "fleet.md lacks the hot card or savings")
left = [u for u in fleet["unreadable"] if f"/{host}-4/" in u["run_dir"]]
check(left and left[0].get("status") == "failed", f"failed node not reported: {fleet['unreadable']}")
check("| failed | the server failed" in md, "fleet.md does not list the failed run")
nodes_md = (out / "nodes.md").read_text()
check(f"| {host}-4 | failed |" in nodes_md, f"nodes.md: {nodes_md}")
# the report and the node folders went back to the user who submitted (sudo's handover)
check((out / "report" / "fleet.json").stat().st_uid != 0, "fleet.json is root's")
# fleet apply --dry-run on every node: the fleet cap, an outlier (the hot card, at least) its
# own sweet spot; the failed node's card, of the same model, the fleet cap
cap = group["fleet_cap"]["cap_w"]
own = {o["label"]: o["own_best"]["cap_w"] for o in group["outliers"]}
for r in range(6):
    log = (out / "nodes" / f"{host}-{r}" / "fleet-apply.log").read_text()
    want = own.get(f"{host}-r{r}", cap)
    check(f"-> {want:g} W (dry run" in log, f"fleet apply on r{r} (want {want:g} W): {log}")
    record = json.loads((out / "nodes" / f"{host}-{r}" / "fleet-apply.json").read_text())
    check(record["dry_run"] and record["cards"][0]["cap_w"] == want, f"record r{r}: {record}")
print(f"ci_slurm: fleet report OK ({group['n_cards']} cards, fleet cap "
      f"{group['fleet_cap']['cap_w']:.0f} W, outliers {sorted(hot)}); fleet apply --dry-run OK")
PY
check_restored fleet 0 1 2 3 4 5

echo "== sbatch: a sweep scancel'd while it runs"
simstates cancel 2
# shellcheck disable=SC2046
as_user "${submit_env[@]}" sbatch --chdir "$tmp/work" -J cancel --ntasks-per-node=2 "$recipe" \
    $(sim_args cancel) "${slow[@]}" > "$tmp/cancel-submit.txt"
job=$(job_of "$tmp/cancel-submit.txt")
for _ in $(seq 90); do
    n0=$(rows "$(ls "$tmp"/out/cancel-*/nodes/"$host"-0/*/caps.csv 2>/dev/null | head -1)")
    n1=$(rows "$(ls "$tmp"/out/cancel-*/nodes/"$host"-1/*/caps.csv 2>/dev/null | head -1)")
    [ "$n0" -ge 1 ] && [ "$n1" -ge 1 ] && break
    sleep 1
done
[ "$n0" -ge 1 ] && [ "$n1" -ge 1 ] || fail "the cancel job's sweeps never finished a cap"
[ -f "$tmp/journal/$host-0/journal.json" ] || fail "no restore journal while the sweep runs"
as_user scancel "$job"
wait_gone "$job" 90
cancel_out=$(ls -d "$tmp"/out/cancel-*)
cat "$tmp/work/powersweep-fleet-$job.log"
grep -q "stopped by a signal" "$tmp/work/powersweep-fleet-$job.log" \
    || fail "the cancelled job's script did not see the signal"
[ -f "$cancel_out/report/fleet.md" ] || fail "the cancelled job wrote no report"
grep -q "interrupted" "$cancel_out/report/fleet.md" || fail "fleet.md does not say the runs were interrupted"
check_restored cancel 0 1

echo "== sbatch: a job whose time limit expires, one node SIGKILLed meanwhile"
simstates timeout 3
rm -f "$tmp/epilog.log"
# the recipe's --signal lead, shortened: SIGTERM 40 s before a 2-minute limit (Slurm may send
# it up to a minute early)
# shellcheck disable=SC2046
as_user "${submit_env[@]}" sbatch --chdir "$tmp/work" -J timeout --ntasks-per-node=3 --time=2 \
    --signal=TERM@40 "$recipe" $(sim_args timeout) "${slow[@]}" > "$tmp/timeout-submit.txt"
job=$(job_of "$tmp/timeout-submit.txt")
for _ in $(seq 60); do [ -f "$tmp/journal/$host-2/journal.json" ] && break; sleep 0.5; done
pid=$("$bin/python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' \
    "$tmp/journal/$host-2/journal.json") || fail "node r2 never wrote its journal"
# a sweep that does not end within KillWait gets SIGKILL: nothing of it runs to restore
kill -KILL "$pid"
wait_gone "$job" 200
timeout_out=$(ls -d "$tmp"/out/timeout-*)
cat "$tmp/work/powersweep-fleet-$job.log"
[ -f "$timeout_out/report/fleet.md" ] || fail "the timed-out job wrote no report"
"$bin/python" - "$timeout_out" "$host" <<'PY'
import json, sys
from pathlib import Path
out, host = Path(sys.argv[1]), sys.argv[2]
for r in (0, 1):
    runs = list((out / "nodes" / f"{host}-{r}").glob("*/run.json"))
    meta = json.loads(runs[0].read_text()) if runs else {}
    if meta.get("status") != "interrupted" or "SIGTERM" not in str(meta.get("error")):
        log = (out / "nodes" / f"{host}-{r}" / "powersweep.log").read_text()[-800:]
        sys.exit(f"ci_slurm: FAIL: node r{r} was not stopped by the time limit's SIGTERM: "
                 f"status {meta.get('status')!r}, error {meta.get('error')!r}; log: {log}")
PY
grep -q "restored" "$tmp/epilog.log" || fail "epilog.sh restored nothing: $(cat "$tmp/epilog.log")"
cat "$tmp/epilog.log"
check_restored timeout 0 1 2
echo "ci_slurm: OK"
