#!/usr/bin/env bash
# A one-host SLURM cluster (Debian's slurm-wlm and munge) to try and test launcher=slurm before a real cluster.
#   scripts/slurm.sh up       install the packages if missing, write the config and a munge key into the state
#                             folder, start munged, slurmctld and slurmd, wait until the node is idle, print the
#                             `export SLURM_CONF=...` line for this shell
#   scripts/slurm.sh down     stop exactly the daemons `up` started (by the pids in their pid files), remove the folder
#   scripts/slurm.sh status   exit 0 when the cluster is up
# The state folder is .slurm/ in the checkout (git-ignored), or SLURM_STATE_DIR. Needs root (apt, the daemons).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STATE=${SLURM_STATE_DIR:-$ROOT/.slurm}
CONF=$STATE/slurm.conf
# pid file -> the process name it must belong to (a stale pid file never makes us stop another process)
DAEMONS=("slurmd.pid slurmd" "slurmctld.pid slurmctld" "munge/munged.pid munged")

say() { echo "slurm.sh: $*" >&2; }

alive() {  # alive <pid file> <name>: the pid in the file is running and is that program
  local pid
  pid=$(cat "$STATE/$1" 2>/dev/null) || return 1
  [[ -n $pid && -r /proc/$pid/comm && $(cat "/proc/$pid/comm") == "$2" ]]
}

status() {
  local d
  for d in "${DAEMONS[@]}"; do alive $d || return 1; done
  SLURM_CONF=$CONF sinfo -h -o %t 2>/dev/null | grep -q idle
}

install_packages() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null && return
  say "installing slurm-wlm and munge (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
}

write_config() {
  local host node
  host=$(hostname -s)
  # the node as slurmd itself sees it (CPUs, sockets, cores, memory): a node line that promises more is refused
  node=$(slurmd -C | head -n 1)
  cat > "$CONF" <<EOF
# written by scripts/slurm.sh: a one-host cluster whose state lives in $STATE
ClusterName=elasticface
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job waits this long (+1 s) before it may start again (default 120 s)
AuthInfo=socket=$STATE/munge/munge.socket,cred_expire=10
# the main scheduling loop every 2 s (default 60 s), so a requeued job starts once it may
SchedulerParameters=sched_interval=2
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
KillWait=10
$node
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

up() {
  [[ $(id -u) == 0 ]] || { say "needs root (it installs packages and starts daemons): sudo make slurm-up"; exit 2; }
  if status; then
    say "already up"
    echo "export SLURM_CONF=$CONF"
    return
  fi
  for d in "${DAEMONS[@]}"; do
    if alive $d; then say "a previous cluster is half up: run scripts/slurm.sh down first"; exit 2; fi
  done
  install_packages
  [[ -L $STATE/munge ]] && rm -rf "$(readlink -f "$STATE/munge")"
  rm -rf "$STATE"
  mkdir -p "$STATE/ctld" "$STATE/d"
  # munged runs as the munge user, who may not pass through the checkout's parents (a root-only home or mktemp
  # folder): its folder lives in /tmp, linked from the state folder
  ln -s "$(mktemp -d /tmp/elasticface-munge.XXXXXX)" "$STATE/munge"
  head -c 1024 /dev/urandom > "$STATE/munge/munge.key"
  local munge
  munge=$(readlink -f "$STATE/munge")
  chown -R munge:munge "$munge"
  chmod 755 "$munge"  # clients reach the socket in it; the key itself is 400
  chmod 400 "$munge/munge.key"
  runuser -u munge -- munged --key-file="$munge/munge.key" --socket="$munge/munge.socket" \
    --pid-file="$munge/munged.pid" --log-file="$munge/munged.log" --seed-file="$munge/munged.seed"
  write_config
  slurmctld -f "$CONF"
  slurmd -f "$CONF"
  local waited=0
  until SLURM_CONF=$CONF sinfo -h -o %t 2>/dev/null | grep -q idle; do
    if (( waited >= 60 )); then
      say "the node is not idle after 60 s: sinfo says '$(SLURM_CONF=$CONF sinfo -h -o %t 2>&1)'; logs in $STATE"
      tail -n 5 "$STATE"/*.log >&2 || true
      exit 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
  say "up in ${waited} s: partition debug, node $(hostname -s) ($(nproc) CPUs); state in $STATE"
  echo "export SLURM_CONF=$CONF"
}

down() {
  local d file name pid jobs
  # this cluster's jobs first: their processes belong to slurmstepd, which slurmd does not take down with it
  if alive slurmctld.pid slurmctld; then
    jobs=$(SLURM_CONF=$CONF squeue -h -o %A 2>/dev/null || true)
    if [[ -n $jobs ]]; then
      SLURM_CONF=$CONF scancel $jobs || true
      for _ in $(seq 30); do [[ -z $(SLURM_CONF=$CONF squeue -h -t R,CG 2>/dev/null) ]] && break; sleep 1; done
    fi
  fi
  for d in "${DAEMONS[@]}"; do
    read -r file name <<< "$d"
    if alive "$file" "$name"; then
      pid=$(cat "$STATE/$file")
      kill "$pid"
      for _ in $(seq 50); do [[ -e /proc/$pid ]] || break; sleep 0.2; done
      [[ -e /proc/$pid ]] && { say "$name ($pid) ignored SIGTERM for 10 s: killing it"; kill -9 "$pid"; }
      say "stopped $name ($pid)"
    fi
  done
  [[ -L $STATE/munge ]] && rm -rf "$(readlink -f "$STATE/munge")"
  rm -rf "$STATE"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: scripts/slurm.sh up|down|status" >&2; exit 2 ;;
esac
