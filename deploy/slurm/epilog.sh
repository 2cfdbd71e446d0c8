#!/usr/bin/env bash
# Slurm Epilog (runs as root after every job on the node): put back any power limit a sweep that
# was killed with SIGKILL left behind. A no-op when the restore journal is empty.
#   slurm.conf:  Epilog=/opt/powersweep/deploy/slurm/epilog.sh
export POWERSWEEP_STATE_DIR="${POWERSWEEP_STATE_DIR:-/var/lib/powersweep}"
powersweep_bin="${POWERSWEEP_BIN:-/usr/local/bin/powersweep}"
[ -x "$powersweep_bin" ] || exit 0
"$powersweep_bin" restore >> /var/log/powersweep-epilog.log 2>&1
# never drain the node because of the restore itself: its log says what happened
exit 0
