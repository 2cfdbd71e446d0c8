#!/usr/bin/env bash
# CI: start a real single-node Slurm (munged, slurmctld, slurmd from the distribution's packages,
# state and config in a temp dir), submit the shipped recipe deploy/slurm/powersweep-fleet.sbatch
# on the simulated rig with several simulated nodes (one planted hot card, one node that fails),
# and check the fleet report, the failed node's record and the whole-fleet --dry-run plan.
# It FAILS, never skips, when Slurm cannot start. Needs root (daemons, packages).
#
#   bash scripts/ci_slurm.sh            # uses ./.venv/bin/powersweep
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
fail() { echo "ci_slurm: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "needs root to start munged, slurmctld and slurmd"
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    echo "== installing slurm-wlm and munge"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null \
        || fail "cannot install slurm-wlm and munge"
fi
bin="$repo/.venv/bin"
[ -x "$bin/powersweep" ] || fail "no $bin/powersweep; install the package first"

tmp=$(mktemp -d /tmp/ci-slurm.XXXXXX)
chmod 700 "$tmp"
host=$(hostname -s)
# ports of this run only, so a second CI on the same machine does not collide
port=$((20000 + $$ % 20000))
stop() {
    set +e
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
    [ -n "${KEEP_CI_SLURM:-}" ] || rm -rf "$tmp"
}
trap stop EXIT

echo "== munge ($tmp)"
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool" "$tmp/out"
chmod 700 "$tmp/munge"
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge/munge.key"
munged --force --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/munge.sock" \
    --pid-file="$tmp/munged.pid" --log-file="$tmp/munge/munged.log" \
    --seed-file="$tmp/munge/munged.seed" || fail "munged did not start"

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
AuthInfo=socket=$tmp/munge/munge.sock
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
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
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

# Six simulated nodes on this one machine. A wrapper (POWERSWEEP_BIN) plants a hot card on
# rank 1 and makes rank 4's server answer every request with HTTP 500, so that node fails mid-
# sweep (its limits must still be restored).
cat > "$tmp/powersweep-ci" <<WRAP
#!/usr/bin/env bash
args=("\$@")
case "\${SLURM_PROCID:-0}" in
  1) args=("\${args[@]/rtx4090-air~0.03/rtx4090-air~0.03~hot}") ;;
  4) args+=(--sim-http-error 500 --max-failed-caps 1) ;;
esac
exec "$bin/powersweep" "\${args[@]}"
WRAP
chmod +x "$tmp/powersweep-ci"
export POWERSWEEP_BIN="$tmp/powersweep-ci"
export POWERSWEEP_FLEET_OUT="$tmp/out" POWERSWEEP_SLURM_DIR="$repo/deploy/slurm"
export POWERSWEEP_STATE_DIR="$tmp/journal" PATH="$bin:$PATH"
sim_args=(--simulate 'rtx4090-air~0.03' --cooling air --load-mode decode-single
    --caps 240,280,320,400,480 --target-cap-seconds 2 --settle fixed --settle-seconds 1
    --time-scale 5 --no-charts --sim-node '{host}-r{rank}')
# `{host}` and `{rank}` are filled in per node by the recipe (as in --url 'http://{host}:8080')

echo "== sbatch: whole-fleet plan (--dry-run)"
set +e
sbatch --wait --chdir "$tmp" -J plan --ntasks-per-node=6 "$repo/deploy/slurm/powersweep-fleet.sbatch" \
    "${sim_args[@]}" --dry-run > "$tmp/plan-submit.txt"
rc=$?
set -e
[ "$rc" -eq 0 ] || fail "dry-run job exit $rc: $(cat "$tmp"/powersweep-fleet-*.log)"
plan=$(ls "$tmp"/out/plan-*/plan.txt)
[ "$(grep -c '^== ' "$plan")" -eq 6 ] || fail "plan.txt has not 6 nodes: $(cat "$plan")"
grep -q "caps" "$plan" || fail "plan.txt holds no caps"
[ "$(grep -c '^#   .*: [0-9]' "$plan")" -eq 6 ] || fail "plan.txt lacks the per-node estimates: $(head -9 "$plan")"

echo "== sbatch: the fleet sweep"
set +e
sbatch --wait --chdir "$tmp" -J fleet --ntasks-per-node=6 "$repo/deploy/slurm/powersweep-fleet.sbatch" \
    "${sim_args[@]}" > "$tmp/fleet-submit.txt"
rc=$?
set -e
log=$(ls -t "$tmp"/powersweep-fleet-*.log | head -1)
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
print(f"ci_slurm: fleet report OK ({group['n_cards']} cards, fleet cap "
      f"{group['fleet_cap']['cap_w']:.0f} W, outliers {sorted(hot)})")
PY
echo "ci_slurm: OK"
