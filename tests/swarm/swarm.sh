#!/usr/bin/env bash
# swarm.sh — a 3-node Docker Swarm made only of private dockerd engines, one per
# network namespace, on a private bridge. Never talks to /var/run/docker.sock.
#
#   swarm.sh up      build bridge + netns + engines, init/join swarm, build image
#   swarm.sh down    remove services, leave, stop engines, delete everything (idempotent)
#   swarm.sh status  show what exists
#   swarm.sh kill-node nX   SIGKILL every process of node nX (engine, containerd,
#                           shims, docker-proxy, containers) via its cgroup
#   swarm.sh cut-node nX    take nX's link to the bridge down: its engine still runs
#                           and answers on its socket, but the swarm no longer hears it
#   swarm.sh dk nX ARGS...  docker CLI against node nX's engine
#
# Internal: swarm.sh _engine nX   (runs inside `ip netns exec jmsw-nX unshare --uts`)
set -uo pipefail

BASE=${JMSW_BASE:-/tmp/jianmu-swarm}
SELF=$(readlink -f "$0")
BR=jmsw0
HOST_IP=10.251.0.1
NODES=(n1 n2 n3)
MANAGER=n1
IMAGE=${JMSW_IMAGE:-jmsw/busybox:1}
LOGDIR=$BASE/logs
TIMINGS=$LOGDIR/timings.log
FWD_COMMENT=jianmu-swarm          # tag of our two host iptables FORWARD rules
ENGINE_TIMEOUT=${JMSW_ENGINE_TIMEOUT:-60}

node_ip()   { echo "10.251.0.1${1#n}"; }
node_ns()   { echo "jmsw-$1"; }
node_dir()  { echo "$BASE/$1"; }
node_sock() { echo "unix://$BASE/$1/docker.sock"; }
veth_host() { echo "jmsw-$1-h"; }          # host end, enslaved to $BR
dk()        { local n=$1; shift; DOCKER_CONFIG=$BASE/.docker-cli docker -H "$(node_sock "$n")" "$@"; }
now()       { date +%s.%N; }
since()     { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}'; }
log()       { printf '[%s] %s\n' "$(date +%H:%M:%S.%3N)" "$*" >&2; }
timing()    { mkdir -p "$LOGDIR"; printf '%s %-28s %8ss\n' "$(date +%FT%T)" "$1" "$2" | tee -a "$TIMINGS" >&2; }
die()       { log "FATAL: $*"; exit 1; }

# ---------------------------------------------------------------- engine (in netns)
# Runs as: ip netns exec jmsw-nX unshare --uts -- swarm.sh _engine nX
# `ip netns exec` already gave us a private (rslave) mount namespace and a fresh
# /sys for the netns; it also *lost* the cgroup mounts under /sys/fs/cgroup.
engine() {
  local n=$1 d; d=$(node_dir "$n")
  hostname "jmsw-$n"
  # 1. cgroups: re-mount every hierarchy the host has (same options => same hierarchy)
  mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup || exit 11
  local src mnt fs opts rest
  while read -r src mnt fs opts rest; do
    case $fs in cgroup|cgroup2) ;; *) continue ;; esac
    mkdir -p "$mnt" && mount -t "$fs" -o "$opts" "$src" "$mnt" || exit 12
  done < /proc/1/mounts
  # 2. hide host paths that dockerd/containerd hard-code (only in this mount ns):
  #    /etc/docker (daemon.json, key.json -> engine ID), /run/docker (plugins,
  #    libnetwork), /run/containerd (shim sockets /run/containerd/s/...)
  mkdir -p "$d/etc-docker"
  mount --bind "$d/etc-docker" /etc/docker || exit 13
  mount -t tmpfs -o mode=700 jmsw-run-docker /run/docker || exit 14
  # A fresh machine may have no /run/containerd: made once, removed by `down`.
  if [ ! -d /run/containerd ]; then
    mkdir /run/containerd && touch "$BASE/.created-run-containerd"
  fi
  mount -t tmpfs -o mode=700 jmsw-run-containerd /run/containerd || exit 15
  # dockerd's own lookups (registry) must fail fast and stay local: point its
  # resolver at the host bridge address, where nothing listens on :53 (ICMP
  # unreachable => immediate error instead of a 20 s timeout per lookup).
  echo "nameserver $HOST_IP" > "$d/resolv.conf"
  mount --bind "$d/resolv.conf" /etc/resolv.conf || exit 16
  # 3. put the engine (and so containerd, shims, docker-proxy) in a cgroup of its
  #    own; containers go under /jmsw-nX/<id> via --cgroup-parent. kill-node/down
  #    walk /sys/fs/cgroup/pids/jmsw-nX to find every process of the node.
  local h
  for h in pids freezer; do
    mkdir -p "/sys/fs/cgroup/$h/jmsw-$n/engine" && echo $$ > "/sys/fs/cgroup/$h/jmsw-$n/engine/cgroup.procs"
  done
  echo '{}' > "$d/daemon.json"
  # No registry: never try to pull for a swarm task (the agent otherwise always
  # tries a pull first and only logs the failure, after DNS timeouts).
  export DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1
  # Default bridge ON with a distinct subnet: swarm tasks that have no network
  # run on it ("default" network mode); with --bridge=none such tasks get no
  # network and host-mode published ports are silently not published.
  # iptables ON: it edits only this netns' own tables.
  # overlay2 works: data-root is on ext4, not overlayfs.
  exec dockerd \
    --config-file "$d/daemon.json" \
    --data-root "$d/data" \
    --exec-root "$d/exec" \
    --pidfile "$d/dockerd.pid" \
    -H "$(node_sock "$n")" \
    --bip "10.254.${n#n}.1/24" \
    --iptables=true \
    --storage-driver="${JMSW_STORAGE:-overlay2}" \
    --exec-opt native.cgroupdriver=cgroupfs \
    --cgroup-parent="/jmsw-$n" \
    --default-address-pool base=10.252.0.0/16,size=24 \
    --swarm-default-advertise-addr "$(node_ip "$n")" \
    --log-level "${JMSW_LOG_LEVEL:-info}"
}

# ---------------------------------------------------------------- helpers
node_pids() {   # every pid in the node's cgroup subtree (pids hierarchy)
  local cg=/sys/fs/cgroup/pids/jmsw-$1
  [ -d "$cg" ] || return 0
  find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -un
}
engine_pid() {  # pid of our dockerd for node, only if it really is ours
  local p f; f=$(node_dir "$1")/dockerd.pid
  [ -s "$f" ] || return 1
  p=$(cat "$f")
  [ -r "/proc/$p/cmdline" ] || return 1
  tr '\0' ' ' < "/proc/$p/cmdline" | grep -q -- "--data-root $(node_dir "$1")/data" || return 1
  echo "$p"
}
engine_up() { dk "$1" version --format '{{.Server.Version}}' >/dev/null 2>&1; }
wait_engine() {
  local n=$1 t0; t0=$(now)
  until engine_up "$n"; do
    if ! ip netns pids "$(node_ns "$n")" 2>/dev/null | grep -q .; then
      log "engine $n died; tail of log:"; tail -n 30 "$(node_dir "$n")/dockerd.log" >&2; return 1
    fi
    (( $(awk -v s="$(since "$t0")" -v m="$ENGINE_TIMEOUT" 'BEGIN{print (s>m)}') )) && { log "engine $n: timeout"; return 1; }
    sleep 0.2
  done
}
cg_rmdir() {   # remove /jmsw-nX cgroup dirs in every hierarchy, deepest first
  local n=$1 h
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h/jmsw-$n" ] || continue
    find "$h/jmsw-$n" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
}

# ---------------------------------------------------------------- up
net_up() {
  [ -d /run/netns ] || { touch "$BASE/.created-run-netns"; }
  if ! ip link show "$BR" >/dev/null 2>&1; then
    ip link add "$BR" type bridge || die "bridge"
  fi
  ip addr replace "$HOST_IP/24" dev "$BR"
  ip link set "$BR" up
  # Host FORWARD policy is DROP (main engine) and bridge-nf-call-iptables=1 is
  # global, so frames bridged between the namespaces would hit it: one tagged rule.
  # A second rule drops anything the test net tries to send off-box (whatever
  # the policy is), so nothing from 10.251.0.0/24 ever leaves the machine.
  iptables -C FORWARD -i "$BR" ! -o "$BR" -m comment --comment "$FWD_COMMENT" -j DROP 2>/dev/null ||
    iptables -I FORWARD -i "$BR" ! -o "$BR" -m comment --comment "$FWD_COMMENT" -j DROP
  iptables -C FORWARD -i "$BR" -o "$BR" -m comment --comment "$FWD_COMMENT" -j ACCEPT 2>/dev/null ||
    iptables -I FORWARD -i "$BR" -o "$BR" -m comment --comment "$FWD_COMMENT" -j ACCEPT
  local n ns vh
  for n in "${NODES[@]}"; do
    ns=$(node_ns "$n"); vh=$(veth_host "$n")
    ip netns list | grep -qw "^$ns" || ip netns add "$ns"
    if ! ip link show "$vh" >/dev/null 2>&1; then
      ip link add "$vh" type veth peer name eth0 netns "$ns" || die "veth $n"
    fi
    ip link set "$vh" master "$BR" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr replace "$(node_ip "$n")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route replace default via "$HOST_IP"
  done
}

engines_up() {
  local n d t0
  for n in "${NODES[@]}"; do
    d=$(node_dir "$n"); mkdir -p "$d"
    if engine_up "$n"; then log "engine $n already up"; continue; fi
    engine_pid "$n" >/dev/null && die "engine $n has a pid but no answer; run down first"
    log "starting engine $n in $(node_ns "$n")"
    setsid ip netns exec "$(node_ns "$n")" unshare --uts -- "$SELF" _engine "$n" \
      >>"$d/dockerd.log" 2>&1 </dev/null &
  done
  for n in "${NODES[@]}"; do wait_engine "$n" || die "engine $n did not come up"; done
}

swarm_up() {
  local t0 tok n state
  state=$(dk "$MANAGER" info --format '{{.Swarm.LocalNodeState}}')
  if [ "$state" != active ]; then
    t0=$(now)
    dk "$MANAGER" swarm init --advertise-addr "$(node_ip "$MANAGER")" \
      --listen-addr "$(node_ip "$MANAGER"):2377" \
      --default-addr-pool 10.253.0.0/16 --dispatcher-heartbeat 1s >/dev/null || die "swarm init"
    timing "swarm-init" "$(since "$t0")"
  fi
  tok=$(dk "$MANAGER" swarm join-token -q worker)
  for n in "${NODES[@]}"; do
    [ "$n" = "$MANAGER" ] && continue
    # active, or pending = a restarted engine that is rejoining by itself
    case $(dk "$n" info --format '{{.Swarm.LocalNodeState}}') in active|pending) continue ;; esac
    t0=$(now)
    dk "$n" swarm join --token "$tok" --advertise-addr "$(node_ip "$n")" \
      --listen-addr "$(node_ip "$n"):2377" "$(node_ip "$MANAGER"):2377" >/dev/null || die "join $n"
    timing "swarm-join-$n" "$(since "$t0")"
  done
  # wait until the manager sees all nodes Ready
  t0=$(now)
  until [ "$(dk "$MANAGER" node ls --format '{{.Status}}' | grep -c '^Ready$')" -eq "${#NODES[@]}" ]; do
    (( $(awk -v s="$(since "$t0")" 'BEGIN{print (s>60)}') )) && die "nodes not Ready after 60 s"
    sleep 0.2
  done
  timing "all-nodes-ready" "$(since "$t0")"
}

image_up() {
  local ctx=$BASE/.imgctx n t0
  mkdir -p "$ctx"
  cp -f /bin/busybox "$ctx/busybox"
  printf 'FROM scratch\nCOPY busybox /bin/busybox\nENTRYPOINT ["/bin/busybox"]\n' > "$ctx/Dockerfile"
  for n in "${NODES[@]}"; do
    dk "$n" image inspect "$IMAGE" >/dev/null 2>&1 && continue
    t0=$(now)
    DOCKER_BUILDKIT=0 dk "$n" build -q -t "$IMAGE" "$ctx" >/dev/null || die "build on $n"
    timing "image-build-$n" "$(since "$t0")"
  done
}

cmd_up() {
  [ -x /bin/busybox ] || die "/bin/busybox missing (apt-get install busybox-static)"
  command -v dockerd >/dev/null || die "dockerd missing"
  mkdir -p "$BASE" "$LOGDIR"
  local t0; t0=$(now)
  net_up
  local t1; t1=$(now); engines_up; timing "engines-start" "$(since "$t1")"
  swarm_up
  image_up
  timing "up-total" "$(since "$t0")"
  dk "$MANAGER" node ls
}

# ---------------------------------------------------------------- down
kill_node() {   # SIGKILL everything in the node's cgroup subtree + its netns
  local n=$1 sig=${2:-KILL} p
  for _ in $(seq 1 50); do
    p=$( { node_pids "$n"; ip netns pids "$(node_ns "$n")" 2>/dev/null; } | sort -un)
    [ -z "$p" ] && return 0
    # shellcheck disable=SC2086
    kill -"$sig" $p 2>/dev/null
    sleep 0.1
  done
  log "node $n: processes left: $p"; return 1
}

stop_engines() {   # SIGTERM all engines at once, wait (max 30 s), then SIGKILL leftovers
  local n p pids=()
  for n in "$@"; do p=$(engine_pid "$n") && { kill -TERM "$p" 2>/dev/null; pids+=("$p"); }; done
  for _ in $(seq 1 300); do
    local alive=0; for p in "${pids[@]}"; do [ -d "/proc/$p" ] && alive=1; done
    [ $alive = 0 ] && break; sleep 0.1
  done
  for p in "${pids[@]}"; do [ -d "/proc/$p" ] && { log "engine pid $p ignored SIGTERM for 30s"; kill -KILL "$p"; }; done
  for n in "$@"; do kill_node "$n" KILL; done
}

cmd_down() {
  local n st t0 t1; t0=$(now); t1=$t0
  # 1. services, swarm membership (only where the engine answers)
  if engine_up "$MANAGER" && [ "$(dk "$MANAGER" info --format '{{.Swarm.ControlAvailable}}' 2>/dev/null)" = true ]; then
    local svcs; svcs=$(dk "$MANAGER" service ls -q 2>/dev/null)
    [ -n "$svcs" ] && { log "removing services"; dk "$MANAGER" service rm $svcs >/dev/null; }
  fi
  # containers: SIGKILL them now (rm -f) instead of waiting for 10 s stop timeouts
  # of PID-1 processes that ignore SIGTERM (busybox sleep/httpd)
  for n in "${NODES[@]}"; do
    engine_up "$n" || continue
    local ids; ids=$(dk "$n" ps -aq 2>/dev/null)
    [ -n "$ids" ] && dk "$n" rm -f $ids >/dev/null 2>&1 &
  done
  wait
  for n in "${NODES[@]}"; do
    [ "$n" = "$MANAGER" ] && continue
    engine_up "$n" || continue
    st=$(dk "$n" info --format '{{.Swarm.LocalNodeState}}' 2>/dev/null)
    [ "$st" = inactive ] || { log "$n leaves"; dk "$n" swarm leave --force >/dev/null 2>&1; }
  done
  if engine_up "$MANAGER"; then
    st=$(dk "$MANAGER" info --format '{{.Swarm.LocalNodeState}}' 2>/dev/null)
    [ "$st" = inactive ] || { log "$MANAGER leaves"; dk "$MANAGER" swarm leave --force >/dev/null 2>&1; }
  fi
  timing "down-services+leave" "$(since "$t1")"; t1=$(now)
  # 2. engines (SIGTERM, then SIGKILL whatever is left in their cgroups/netns)
  stop_engines "${NODES[@]}"
  for n in "${NODES[@]}"; do cg_rmdir "$n"; done
  timing "down-stop-engines" "$(since "$t1")"
  # 3. network
  for n in "${NODES[@]}"; do
    ip netns list | grep -qw "^$(node_ns "$n")" && ip netns del "$(node_ns "$n")"
    ip link show "$(veth_host "$n")" >/dev/null 2>&1 && ip link del "$(veth_host "$n")"
  done
  ip link show "$BR" >/dev/null 2>&1 && ip link del "$BR"
  local r
  while r=$(iptables -S FORWARD 2>/dev/null | grep -m1 -- "--comment $FWD_COMMENT"); do
    # shellcheck disable=SC2086
    iptables ${r/-A FORWARD/-D FORWARD} || break
  done
  if [ -e "$BASE/.created-run-netns" ] && [ -d /run/netns ] && [ -z "$(ls -A /run/netns)" ]; then
    umount /run/netns 2>/dev/null; rmdir /run/netns 2>/dev/null && rm -f "$BASE/.created-run-netns"
  fi
  if [ -e "$BASE/.created-run-containerd" ]; then
    rmdir /run/containerd 2>/dev/null && rm -f "$BASE/.created-run-containerd"
  fi
  # 4. mounts (should be none in the host namespace: engines mount in their own ns)
  local m
  for m in $(awk -v b="$BASE/" 'index($5,b)==1{print $5}' /proc/self/mountinfo | sort -r); do umount -l "$m"; done
  # 5. files
  for n in "${NODES[@]}"; do rm -rf "$(node_dir "$n")"; done
  rm -rf "$BASE/.imgctx" "$BASE/.docker-cli"
  timing "down-total" "$(since "$t0")"
  verify_clean
}

verify_clean() {
  local bad=0 x
  x=$(ip netns list 2>/dev/null | grep jmsw); [ -n "$x" ] && { log "LEFT netns: $x"; bad=1; }
  x=$(ip -o link 2>/dev/null | grep jmsw); [ -n "$x" ] && { log "LEFT links: $x"; bad=1; }
  x=$(iptables -S FORWARD 2>/dev/null | grep -- "$FWD_COMMENT"); [ -n "$x" ] && { log "LEFT iptables: $x"; bad=1; }
  x=$(ls -d /sys/fs/cgroup/*/jmsw-* 2>/dev/null); [ -n "$x" ] && { log "LEFT cgroups: $x"; bad=1; }
  x=$(grep -l -- "$BASE/" /proc/[0-9]*/mountinfo 2>/dev/null); [ -n "$x" ] && { log "LEFT mounts (in ns of): $x"; bad=1; }
  local p exe
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    case ${exe##*/} in dockerd|containerd|containerd-shim*|docker-proxy|runc|busybox) ;; *) continue ;; esac
    if tr '\0' ' ' < "$p/cmdline" 2>/dev/null | grep -q -- "$BASE/"; then log "LEFT process: ${p#/proc/} $(tr '\0' ' ' < "$p/cmdline")"; bad=1; fi
  done
  x=$(ls -d "$BASE"/n[0-9] 2>/dev/null); [ -n "$x" ] && { log "LEFT dirs: $x"; bad=1; }
  if [ $bad = 0 ]; then log "clean: no jmsw netns/links/iptables rule/cgroups, no mounts or processes of ours"; fi
  return $bad
}

cmd_status() {
  ip netns list | grep jmsw || true
  ip -br link | grep jmsw || true
  local n
  for n in "${NODES[@]}"; do
    printf '%s: pid=%s up=%s\n' "$n" "$(engine_pid "$n" || echo -)" "$(engine_up "$n" && echo yes || echo no)"
  done
  engine_up "$MANAGER" && dk "$MANAGER" node ls 2>/dev/null
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  kill-node) kill_node "$2" KILL ;;
  cut-node) ip link set "$(veth_host "$2")" down ;;
  dk) shift; n=$1; shift; DOCKER_CONFIG=$BASE/.docker-cli exec docker -H "$(node_sock "$n")" "$@" ;;
  _engine) engine "$2" ;;
  *) echo "usage: $0 up|down|status|kill-node nX|cut-node nX|dk nX ARGS" >&2; exit 2 ;;
esac
