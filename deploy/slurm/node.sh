#!/usr/bin/env bash
# One node's share of a fleet sweep (run by srun from powersweep-fleet.sbatch), or, with
# `--summarise DIR`, the table of every node's outcome.
#
# Writes $POWERSWEEP_FLEET_RUN_DIR/nodes/<host>[-<rank>]/ with the run directory, the node's log,
# `status` (ok or failed), `exit_code`, and for --dry-run `plan.txt`. It exits with powersweep's
# code, so Slurm records the task as failed, but never touches the other nodes.
#
# `--apply REPORT_DIR [ARGS...]` instead runs `powersweep fleet apply REPORT_DIR` on this node
# (the fleet's answer set on its cards; its record goes to nodes/<node>/fleet-apply.json).
set -uo pipefail

if [ "${1:-}" = "--summarise" ]; then
    echo "| node | status | exit code | last line of its log |"
    echo "|---|---|---|---|"
    for d in "$2"/nodes/*/; do
        name=$(basename "$d")
        status=$(cat "$d/status" 2>/dev/null || echo "no status (killed?)")
        code=$(cat "$d/exit_code" 2>/dev/null || echo "?")
        last=$(grep -v '^\s*$' "$d/powersweep.log" 2>/dev/null | tail -n 1 | tr '|' '/')
        echo "| $name | $status | $code | ${last:-} |"
    done
    exit 0
fi

host=$(hostname -s)
rank="${SLURM_PROCID:-0}"
node="$host"
# several tasks on one machine (a simulated fleet): each is its own node
if [ "${SLURM_STEP_NUM_TASKS:-1}" -gt "${SLURM_STEP_NUM_NODES:-1}" ]; then node="$host-$rank"; fi
dir="${POWERSWEEP_FLEET_RUN_DIR:?set by powersweep-fleet.sbatch}/nodes/$node"
mkdir -p "$dir" || exit 1
# a simulated card is seeded by its node's name, so every node gets its own card
export POWERSWEEP_SIM_NODE="${POWERSWEEP_SIM_NODE:-$node}"

bin="${POWERSWEEP_BIN:-powersweep}"
cmd=("$bin")
# Setting power limits needs root: either the job runs powersweep through a sudo rule
# (POWERSWEEP_SUDO=1), or the node is prepared by a root prolog (see README.md). sudo resets the
# environment (and refuses --preserve-env without a SETENV rule), so everything powersweep must
# know travels as a command-line option: --state-dir and --sim-node below.
if [ "${POWERSWEEP_SUDO:-0}" = "1" ]; then
    full=$(command -v "$bin") || { echo "error: $bin not found on $node" >&2; exit 2; }
    cmd=(sudo -n "$full")
fi

# `{host}`, `{rank}` and `{node}` in an argument become this task's
fill() {
    local a="$1"
    a="${a//\{host\}/$host}"
    a="${a//\{rank\}/$rank}"
    a="${a//\{node\}/$node}"
    printf '%s' "$a"
}

# Options from the environment, as options (the same with or without sudo); the state
# directory may name the node (several simulated nodes on one machine each need their own).
env_opts=()
[ -n "${POWERSWEEP_STATE_DIR:-}" ] && env_opts+=(--state-dir "$(fill "$POWERSWEEP_STATE_DIR")")

if [ "${1:-}" = "--apply" ]; then
    shift
    report="${1:?--apply needs the fleet report folder}"
    shift
    extra=()
    for a in "$@"; do extra+=("$(fill "$a")"); done
    "${cmd[@]}" fleet apply "$report" --node "$node" --record "$dir/fleet-apply.json" \
        "${env_opts[@]}" "${extra[@]}" > "$dir/fleet-apply.log" 2>&1
    rc=$?
    echo "$node: fleet apply $( [ "$rc" -eq 0 ] && echo ok || echo "failed (exit $rc)")"
    tail -n 20 "$dir/fleet-apply.log"
    exit "$rc"
fi

# The node's server: a start hook (POWERSWEEP_SERVER_HOOK) that starts or finds it and prints
# its URL on its last line of output, which fills in `{url}` (or becomes --url); else the
# arguments' own URL template (`--url 'http://{host}:8080'`).
url=""
hook="${POWERSWEEP_SERVER_HOOK:-}"
if [ -n "$hook" ]; then
    url=$("$hook" start "$node" "$rank" 2> "$dir/server-hook.log" | tail -n 1)
    hook_rc=$?
    if [ "$hook_rc" -ne 0 ] || [ -z "$url" ]; then
        echo "error: the server hook $hook failed on $node (exit $hook_rc, URL '$url'); see" \
            "server-hook.log" > "$dir/powersweep.log"
        echo 2 > "$dir/exit_code"
        echo failed > "$dir/status"
        echo "$node: failed (server hook)"
        exit 2
    fi
fi

args=()
has_url=0
has_node=0
simulated=0
for a in "$@"; do
    a=$(fill "$a")
    case "$a" in
        *"{url}"*) a="${a//\{url\}/$url}" ;;
    esac
    case "$a" in
        --url | --url=*) has_url=1 ;;
        --sim-node | --sim-node=*) has_node=1 ;;
        --simulate | --simulate=*) simulated=1 ;;
    esac
    args+=("$a")
done
[ -n "$url" ] && [ "$has_url" = 0 ] && args+=(--url "$url")
[ "$simulated" = 1 ] && [ "$has_node" = 0 ] && args+=(--sim-node "$POWERSWEEP_SIM_NODE")

dry=0
for a in "${args[@]}"; do [ "$a" = "--dry-run" ] && dry=1; done
if [ "$dry" = 1 ]; then
    {
        echo "== $node"
        # what Slurm gave this task (a site that hides unrequested GPUs shows none here)
        echo "slurm GPUs: ${SLURM_STEP_GPUS:-${SLURM_JOB_GPUS:-none requested}}," \
            "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset}"
        "${cmd[@]}" sweep "${env_opts[@]}" "${args[@]}"
    } > "$dir/plan.txt" 2> "$dir/powersweep.log"
    rc=$?
else
    # `exec` would lose the status file; powersweep handles SIGTERM itself (limits restored)
    "${cmd[@]}" sweep --out "$dir" --quiet "${env_opts[@]}" "${args[@]}" > "$dir/powersweep.log" 2>&1 &
    child=$!
    trap 'kill -TERM "$child" 2>/dev/null' TERM INT HUP
    wait "$child"
    rc=$?
    # a trapped signal ends the first wait early: wait again for the restore to finish
    while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
fi
[ -n "$hook" ] && "$hook" stop "$node" "$rank" >> "$dir/server-hook.log" 2>&1
echo "$rc" > "$dir/exit_code"
if [ "$rc" -eq 0 ]; then echo ok > "$dir/status"; else echo failed > "$dir/status"; fi
echo "$node: $( [ "$rc" -eq 0 ] && echo ok || echo "failed (exit $rc)")"
exit "$rc"
