#!/usr/bin/env bash
# netlab.sh: emulate a small cluster on this one machine for distributed (MPI) experiments.
#
# Each emulated host is a Linux network namespace bppsa-h<i> with one interface eth0
# (10.99.0.<i+1>/24).  Its veth peer bpv<i> stays in the root namespace, where a userspace
# "delay switch" (bench/mp/delay_switch.cpp) forwards frames between all bpv<i> ports and
# holds every frame for a fixed one-way delay.  Round-trip time between two hosts is therefore
# about 2 * DELAY + a few tens of microseconds.
#
# Why a userspace switch and not `tc qdisc add dev ... netem delay`?  This kernel (Firecracker
# VM, 6.18) is built without CONFIG_NET_SCH_NETEM (also without fq/sfq/prio), see
# /proc/config.gz; veth, bridge, AF_PACKET, TUN and htb/tbf are available.
#
# Usage (as root):
#   scripts/netlab.sh up N DELAY_MS [DIR]  create N hosts (1..64) with one-way delay DELAY_MS
#                                          (decimal, e.g. 0.1, 1, 10; 0 allowed); DIR defaults
#                                          to /tmp/bppsa-netlab.  Any previous lab is torn down.
#   scripts/netlab.sh down [DIR]           stop the switch, end processes still running in the
#                                          lab namespaces, delete namespaces and links
#                                          (idempotent; also cleans leftovers of a crashed run)
#   scripts/netlab.sh rtt [DIR]            median TCP round trip bppsa-h0 <-> bppsa-h1
#   scripts/netlab.sh stats [DIR]          print the switch's frame counters (incl. drops)
#
# `up` writes into DIR:
#   delay_switch   the switch binary (built from bench/mp/delay_switch.cpp if needed)
#   switch.pid     its pid;  switch.log  its stderr (startup line, counters on exit)
#   hostfile       "10.99.0.<i+1> slots=1" per host
#   rsh            Open MPI plm_rsh_agent: `rsh HOST cmd...` runs cmd in HOST's namespace
#   mpirun-args    the extra mpirun arguments (one line)
#
# Running MPI: mpirun itself must be started INSIDE namespace bppsa-h0 (it is host 10.99.0.1;
# the other ranks are launched through DIR/rsh):
#   ip netns exec bppsa-h0 mpirun --allow-run-as-root $(cat /tmp/bppsa-netlab/mpirun-args) -np K prog
# `--mca mpi_yield_when_idle 1` (in mpirun-args) is essential on this 2-core machine: Open MPI
# busy-polls otherwise, and with many ranks per core a round trip becomes ~8 ms.
#
# Environment: NETLAB_RT_PRIO (default 20) runs the switch as SCHED_FIFO with that priority so
# busy MPI ranks cannot delay its wake-ups (it never spins); 0 disables.
set -euo pipefail

PREFIX=bppsa-h        # namespace names: bppsa-h0 ...
LINK=bpv              # root-side veth names: bpv0 ...
SUBNET=10.99.0        # host i has 10.99.0.(i+1)/24
DEFAULT_DIR=/tmp/bppsa-netlab
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=$REPO/bench/mp/delay_switch.cpp

die() { echo "netlab: error: $*" >&2; exit 1; }
log() { echo "netlab: $*" >&2; }

need_root_and_ip() {
  [[ $EUID -eq 0 ]] || die "must run as root (network namespaces and AF_PACKET need it)"
  command -v ip >/dev/null || die "'ip' (iproute2) not found"
}

# Namespaces / links of this lab that exist right now (also those of a crashed run).
lab_namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}[0-9]+$" || true; }
lab_links() { ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^${LINK}[0-9]+$" || true; }

# Is executable path $1 (a /proc/PID/exe target) the delay_switch of lab directory $2?
# (" (deleted)": the binary was rebuilt while it ran.)
is_our_switch_exe() { [[ $1 == "$2/delay_switch" || $1 == "$2/delay_switch (deleted)" ]]; }

# Lab directory as an absolute canonical path (it is compared with /proc/PID/exe targets).
canon_dir() { realpath -m -- "${1:-$DEFAULT_DIR}"; }

# Stop the switch recorded in DIR/switch.pid, and any other process running DIR/delay_switch.
stop_switch() {
  local dir=$1 pid exe stopped=0
  local pids=()
  if [[ -f $dir/switch.pid ]]; then pids+=("$(cat "$dir/switch.pid")"); fi
  # A crashed run may have lost its pid file: find switches started from this DIR's binary.
  for exe in /proc/[0-9]*/exe; do
    if is_our_switch_exe "$(readlink "$exe" 2>/dev/null || true)" "$dir"; then
      pid=${exe#/proc/}; pids+=("${pid%/exe}")
    fi
  done
  for pid in "${pids[@]}"; do
    [[ $pid =~ ^[0-9]+$ ]] || continue
    # Only signal it if it really is our delay_switch (the pid may have been reused).
    is_our_switch_exe "$(readlink "/proc/$pid/exe" 2>/dev/null || true)" "$dir" || continue
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    log "stopped delay_switch (pid $pid)"
    stopped=1
  done
  rm -f "$dir/switch.pid"
  # The switch prints its counters on exit; show them (dropped frames are worth knowing about).
  if (( stopped )) && [[ -f $dir/switch.log ]]; then
    grep 'exit:' "$dir/switch.log" | tail -n 1 >&2 || true
  fi
}

cmd_down() {
  local dir
  dir=$(canon_dir "${1:-}")
  need_root_and_ip
  stop_switch "$dir"
  local ns pid
  for ns in $(lab_namespaces); do
    # Processes left inside a lab namespace (e.g. orted of a crashed mpirun) would keep the
    # namespace and its veth alive after `ip netns del`; they belong to the lab, end them.
    for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -TERM "$pid" 2>/dev/null || true; done
    sleep 0.2
    for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  local l
  for l in $(lab_links); do ip link del "$l" 2>/dev/null || true; done
  [[ -z $(lab_namespaces) ]] || die "namespaces still present: $(lab_namespaces | tr '\n' ' ')"
  [[ -z $(lab_links) ]] || die "links still present: $(lab_links | tr '\n' ' ')"
  rm -f "$dir/hostfile" "$dir/mpirun-args" "$dir/delay_us"
  rm -rf "${dir:?}/tmp"
  log "down: no ${PREFIX}* namespaces, no ${LINK}* links"
}

build_switch() {
  local dir=$1
  if [[ ! -x $dir/delay_switch || $SRC -nt $dir/delay_switch ]]; then
    [[ -f $SRC ]] || die "source not found: $SRC"
    command -v g++ >/dev/null || die "g++ not found (needed to build $SRC)"
    log "building $dir/delay_switch"
    g++ -O2 -std=c++20 -o "$dir/delay_switch.tmp" "$SRC"
    mv -f "$dir/delay_switch.tmp" "$dir/delay_switch"
  fi
}

cmd_up() {
  [[ $# -ge 2 ]] || die "usage: netlab.sh up N DELAY_MS [DIR]"
  local n=$1 delay_ms=$2 dir=${3:-$DEFAULT_DIR}
  need_root_and_ip
  [[ $n =~ ^[0-9]+$ ]] || die "N must be an integer, got '$n'"
  n=$((10#$n))             # "08" is 8, not an octal error
  (( n >= 1 && n <= 64 )) || die "N must be between 1 and 64, got $n"
  [[ $delay_ms =~ ^[0-9]+(\.[0-9]+)?$|^\.[0-9]+$ ]] || die "DELAY_MS must be a non-negative decimal, got '$delay_ms'"
  local delay_us
  delay_us=$(awk -v d="$delay_ms" 'BEGIN { printf "%d", d * 1000 + 0.5 }')
  dir=$(canon_dir "$dir")

  mkdir -p "$dir"
  cmd_down "$dir"          # start from a clean slate (also removes a crashed run's leftovers)
  build_switch "$dir"

  local i ns
  for ((i = 0; i < n; i++)); do
    ns=$PREFIX$i
    ip netns add "$ns"
    # Deterministic MACs (locally administered) make the switch's learning table readable.
    ip link add "$LINK$i" address "$(printf '02:99:00:00:01:%02x' "$i")" type veth \
      peer name eth0 address "$(printf '02:99:00:00:00:%02x' "$i")" netns "$ns"
    # No IPv6 on the lab links: avoids router solicitations / MLD chatter through the switch.
    sysctl -qw "net.ipv6.conf.$LINK$i.disable_ipv6=1" 2>/dev/null || true
    ip link set "$LINK$i" up
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.eth0.disable_ipv6=1 2>/dev/null || true
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$SUBNET.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
  done

  # One port alone cannot forward anything; the switch needs >= 2 ports.
  rm -f "$dir/switch.log"
  if (( n >= 2 )); then
    local ports=()
    for ((i = 0; i < n; i++)); do ports+=("$LINK$i"); done
    local rt=${NETLAB_RT_PRIO:-20}
    # setsid: the switch gets its own session, so it survives this shell and a Ctrl-C in it.
    setsid "$dir/delay_switch" --delay-us "$delay_us" --rt "$rt" "${ports[@]}" \
      >"$dir/switch.log" 2>&1 </dev/null &
    echo $! >"$dir/switch.pid"
    sleep 0.3
    kill -0 "$(cat "$dir/switch.pid")" 2>/dev/null || { cat "$dir/switch.log" >&2; die "delay_switch did not start"; }
    head -n 1 "$dir/switch.log" >&2
  fi

  : >"$dir/hostfile"
  for ((i = 0; i < n; i++)); do echo "$SUBNET.$((i + 1)) slots=1" >>"$dir/hostfile"; done
  echo "$delay_us" >"$dir/delay_us"

  # Open MPI plm_rsh_agent: called as `rsh [options] HOST command...` like ssh would be.
  cat >"$dir/rsh" <<EOF
#!/bin/sh
# Generated by scripts/netlab.sh: Open MPI's launcher agent for the namespace lab.
# Maps host $SUBNET.K to namespace ${PREFIX}\$((K-1)) and runs the command there, the way
# ssh would (arguments joined by spaces, parsed by a shell).
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done   # ignore ssh-style options
[ \$# -ge 2 ] || { echo "netlab rsh: usage: rsh HOST command..." >&2; exit 2; }
host=\$1; shift
case "\$host" in
  $SUBNET.*) k=\${host##*.} ;;
  *) echo "netlab rsh: unknown host '\$host' (expected $SUBNET.K)" >&2; exit 2 ;;
esac
ns=${PREFIX}\$((k - 1))
# All namespaces share one filesystem and one hostname, so the Open MPI daemons of different
# "hosts" would use the same session directory (/tmp/ompi.HOSTNAME.UID) and PMIx/hwloc
# shared-memory files there, and crash (hwloc_shmem_topology_write segfault, PMIX dstore
# errors).  Give each namespace its own temporary directory.
tmp=$dir/tmp/\$ns
mkdir -p "\$tmp"
export OMPI_MCA_orte_tmpdir_base="\$tmp" TMPDIR="\$tmp"
exec ip netns exec "\$ns" sh -c "\$*"
EOF
  chmod +x "$dir/rsh"

  echo "--hostfile $dir/hostfile --mca plm_rsh_agent $dir/rsh --mca btl tcp,self" \
    "--mca btl_tcp_if_include $SUBNET.0/24 --mca oob_tcp_if_include $SUBNET.0/24" \
    "--mca mpi_yield_when_idle 1" >"$dir/mpirun-args"

  log "up: $n hosts ${PREFIX}0..${PREFIX}$((n - 1)) ($SUBNET.1-$SUBNET.$n), one-way delay ${delay_us} us"
  log "run MPI with: ip netns exec ${PREFIX}0 mpirun --allow-run-as-root \$(cat $dir/mpirun-args) -np K prog"
}

cmd_rtt() {
  local dir
  dir=$(canon_dir "${1:-}")
  need_root_and_ip
  local py
  # shellcheck source=lib/python_env.sh
  py=$(cd "$REPO" && . scripts/lib/python_env.sh && bppsa_python) || die "no Python: run scripts/setup.sh"
  ip netns list | grep -qE "^${PREFIX}1( |$)" || die "need at least 2 hosts (run 'netlab.sh up N DELAY_MS' with N >= 2)"
  local port=47999 rounds=200
  # TCP ping-pong with TCP_NODELAY: server echoes 64-byte messages in ${PREFIX}1.
  ip netns exec "${PREFIX}1" "$py" - "$SUBNET.2" "$port" "$rounds" <<'EOF' &
import socket, sys
host, port, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((host, port)); srv.listen(1); srv.settimeout(30)
c, _ = srv.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range(rounds + 10):
    buf = b""
    while len(buf) < 64:
        d = c.recv(64 - len(buf))
        if not d: sys.exit(0)
        buf += d
    c.sendall(buf)
EOF
  local srv=$!
  local out rc=0
  out=$(ip netns exec "${PREFIX}0" "$py" - "$SUBNET.2" "$port" "$rounds" <<'EOF'
import socket, statistics, sys, time
host, port, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for attempt in range(100):                      # wait for the server to listen
    try:
        s = socket.create_connection((host, port), timeout=10); break
    except OSError:
        time.sleep(0.05)
else:
    sys.exit("netlab rtt: cannot connect to server")
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
msg = b"x" * 64
def once():
    t = time.perf_counter(); s.sendall(msg); buf = b""
    while len(buf) < 64:
        d = s.recv(64 - len(buf))
        if not d: sys.exit("netlab rtt: connection closed")
        buf += d
    return time.perf_counter() - t
for _ in range(10): once()                      # warm-up (ARP, TCP slow start)
r = sorted(once() * 1e3 for _ in range(rounds))
print(f"median {statistics.median(r):.3f} ms  (min {r[0]:.3f}, p10 {r[len(r)//10]:.3f}, "
      f"p90 {r[9*len(r)//10]:.3f}, max {r[-1]:.3f}; {rounds} round trips)")
EOF
  ) || rc=$?
  wait "$srv" 2>/dev/null || true
  (( rc == 0 )) || die "rtt measurement failed"
  local d=""
  [[ -f $dir/delay_us ]] && d=" [one-way delay $(cat "$dir/delay_us") us, expect ~$(awk -v u="$(cat "$dir/delay_us")" 'BEGIN{printf "%.3f", 2*u/1000}') ms + overhead]"
  echo "rtt ${PREFIX}0 <-> ${PREFIX}1 (TCP, 64 B): $out$d"
}

cmd_stats() {
  local dir
  dir=$(canon_dir "${1:-}")
  [[ -f $dir/switch.pid ]] || die "no switch running (no $dir/switch.pid)"
  local pid
  pid=$(cat "$dir/switch.pid")
  is_our_switch_exe "$(readlink "/proc/$pid/exe" 2>/dev/null || true)" "$dir" || die "switch (pid $pid) not running"
  kill -USR1 "$pid"
  sleep 0.2
  grep 'stats:' "$dir/switch.log" | tail -n 1
}

case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down "$@" ;;
  rtt) shift; cmd_rtt "$@" ;;
  stats) shift; cmd_stats "$@" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
