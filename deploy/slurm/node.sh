#!/usr/bin/env bash
# One node's share of a fleet sweep (run by srun from powersweep-fleet.sbatch), or, with
# `--summarise DIR`, the table of every node's outcome.
#
# Writes $POWERSWEEP_FLEET_RUN_DIR/nodes/<host>[-<rank>]/ with the run directory, the node's log,
# `status` (ok or failed), `exit_code`, and for --dry-run `plan.txt`. It exits with powersweep's
# code, so Slurm records the task as failed, but never touches the other nodes.
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

args=()
for a in "$@"; do
    a="${a//\{host\}/$host}"
    a="${a//\{rank\}/$rank}"
    args+=("$a")
done

cmd=("${POWERSWEEP_BIN:-powersweep}")
# Setting power limits needs root: either the job runs powersweep through a sudo rule
# (POWERSWEEP_SUDO=1), or the node is prepared by a root prolog (see README.md).
if [ "${POWERSWEEP_SUDO:-0}" = "1" ]; then
    cmd=(sudo -n --preserve-env=POWERSWEEP_STATE_DIR,POWERSWEEP_SIM_NODE "$(command -v "${cmd[0]}")")
fi

dry=0
for a in "${args[@]}"; do [ "$a" = "--dry-run" ] && dry=1; done
if [ "$dry" = 1 ]; then
    { echo "== $node"; "${cmd[@]}" sweep "${args[@]}"; } > "$dir/plan.txt" 2> "$dir/powersweep.log"
    rc=$?
else
    # `exec` would lose the status file; powersweep handles SIGTERM itself (limits restored)
    "${cmd[@]}" sweep --out "$dir" --quiet "${args[@]}" > "$dir/powersweep.log" 2>&1 &
    child=$!
    trap 'kill -TERM "$child" 2>/dev/null' TERM INT HUP
    wait "$child"
    rc=$?
    # a trapped signal ends the first wait early: wait again for the restore to finish
    while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
fi
echo "$rc" > "$dir/exit_code"
if [ "$rc" -eq 0 ]; then echo ok > "$dir/status"; else echo failed > "$dir/status"; fi
echo "$node: $( [ "$rc" -eq 0 ] && echo ok || echo "failed (exit $rc)")"
exit "$rc"
