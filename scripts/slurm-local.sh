#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, from Debian's packages (slurm-wlm, munge), with no
# systemd: munged, slurmctld and slurmd started as daemons of their own, everything they keep
# (key, state, spool, logs, pid files) in one folder. tests/test_slurm.py runs a study through it.
#   bash scripts/slurm-local.sh start DIR   # prints the line to export: SLURM_CONF=DIR/slurm.conf
#   bash scripts/slurm-local.sh stop DIR
#   bash scripts/slurm-local.sh install     # apt-get install slurm-wlm munge (root)
# Runs as root (slurmd starts jobs as their submitting user). One partition, `debug`, of this
# machine's cores; no accounting database (lab reads job states from squeue where sacct has none).
set -euo pipefail

usage() { echo "usage: bash scripts/slurm-local.sh start DIR | stop DIR | install" >&2; exit 2; }
action="${1:-}"
[ -n "$action" ] || usage

if [ "$action" = install ]; then
  if command -v slurmctld > /dev/null && command -v munged > /dev/null; then
    echo "slurm-local: slurm-wlm and munge are installed"; exit 0
  fi
  [ "$(id -u)" = 0 ] || { echo "slurm-local: install needs root (apt-get)" >&2; exit 2; }
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge > /dev/null
  exit 0
fi

dir="${2:-}"
[ -n "$dir" ] || usage
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
conf="$dir/slurm.conf"

stop() {
  for daemon in slurmd slurmctld; do
    [ -f "$dir/$daemon.pid" ] && kill "$(cat "$dir/$daemon.pid")" 2> /dev/null || true
  done
  [ -f "$dir/munge/munged.pid" ] && kill "$(cat "$dir/munge/munged.pid")" 2> /dev/null || true
  sleep 1
  rm -f "$dir"/*.pid "$dir/munge/munged.pid"
}

case "$action" in
  stop) stop; echo "slurm-local: stopped ($dir)"; exit 0 ;;
  start) ;;
  *) usage ;;
esac

for tool in munged slurmctld slurmd sbatch; do
  command -v "$tool" > /dev/null || { echo "slurm-local: $tool not found: bash scripts/slurm-local.sh install" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "slurm-local: slurmd must run as root (it starts jobs as their user)" >&2; exit 2; }

stop  # a cluster left running from this folder
mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
chmod 700 "$dir/munge"
[ -f "$dir/munge/munge.key" ] || { head -c 1024 /dev/urandom > "$dir/munge/munge.key"; chmod 600 "$dir/munge/munge.key"; }
munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/seed" -f

host="$(hostname)"
memory_mb="$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)"
# Ports of their own, so that a cluster already on the machine's default ports is left alone.
port="${SLURM_LOCAL_PORT:-16817}"
cat > "$conf" << EOF
ClusterName=lab-local
SlurmctldHost=$host
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=600
KillWait=5
JobRequeue=1
NodeName=$host CPUs=$(nproc) RealMemory=$memory_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -f "$conf"
slurmd -f "$conf"
export SLURM_CONF="$conf"
for _ in $(seq 30); do
  if sinfo --noheader --states=idle,mixed,allocated 2> /dev/null | grep -q debug; then
    echo "export SLURM_CONF=$conf"
    exit 0
  fi
  sleep 1
done
echo "slurm-local: the node did not come up in 30 s; logs in $dir/log" >&2
exit 1
