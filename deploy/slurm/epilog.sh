#!/usr/bin/env bash
# Slurm Epilog (runs as root after every job on the node): put back any power limit a sweep that
# was killed with SIGKILL left behind. A no-op when the restore journal is empty.
#   slurm.conf:  Epilog=/opt/powersweep/deploy/slurm/epilog.sh
# POWERSWEEP_STATE_DIR must name the state directory the sweeps used (default, as root:
# /var/lib/powersweep); POWERSWEEP_EPILOG_LOG where the restore's output goes.
export POWERSWEEP_STATE_DIR="${POWERSWEEP_STATE_DIR:-/var/lib/powersweep}"
powersweep_bin="${POWERSWEEP_BIN:-/usr/local/bin/powersweep}"
log="${POWERSWEEP_EPILOG_LOG:-/var/log/powersweep-epilog.log}"
[ -x "$powersweep_bin" ] || exit 0
{
    echo "== $(date -u +%FT%TZ) job ${SLURM_JOB_ID:-?}: restore from $POWERSWEEP_STATE_DIR"
    "$powersweep_bin" restore --state-dir "$POWERSWEEP_STATE_DIR"
    echo "exit $?"
} >> "$log" 2>&1
# never drain the node because of the restore itself: its log says what happened
exit 0
