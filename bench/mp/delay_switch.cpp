// delay_switch: a tiny learning Ethernet switch in userspace that delays every frame by a fixed
// one-way latency.  Used by scripts/netlab.sh to emulate a cluster of "hosts" (Linux network
// namespaces joined by veth pairs) with a configurable link latency for distributed runs.
//
// Why not `tc qdisc ... netem delay`?  The kernel this project runs on (a Firecracker VM, 6.18)
// is built without CONFIG_NET_SCH_NETEM (and without fq/sfq/prio; see /proc/config.gz), so the
// kernel cannot delay packets itself.  What it does have is veth, AF_PACKET and TUN, which is
// enough to do the delaying here instead.
//
// Build: g++ -O2 -std=c++20 -o delay_switch delay_switch.cpp        (no other dependencies)
// Usage: delay_switch --delay-us D [--rt PRIO] [--max-queue-mb M] [--no-early] PORT1 PORT2 ...
//   PORTs are interface names in the current namespace (the root-side ends of veth pairs).
//
// How it works:
//   * One AF_PACKET/SOCK_RAW socket per port (ETH_P_ALL, bound to the port's ifindex,
//     PACKET_IGNORE_OUTGOING so our own transmissions are not read back, the port put into
//     promiscuous mode via PACKET_ADD_MEMBERSHIP/PACKET_MR_PROMISC).
//   * PACKET_VNET_HDR is enabled on every socket.  veth does TSO/GSO and checksum offload, so a
//     frame read from a veth can be an up-to-64 KiB GSO super-frame whose TCP/UDP checksum has
//     not been computed yet (CHECKSUM_PARTIAL).  Without the virtio_net_hdr the kernel would
//     hand us such frames without their offload metadata and we could neither re-send them
//     (larger than the MTU: EMSGSIZE) nor deliver them with a valid checksum.  With the header
//     we read the metadata alongside the frame and pass it back unchanged on send(), exactly
//     like a hypervisor's tap backend, so offloads keep working end to end and no `ethtool -K`
//     (not installed here anyway) is needed.
//   * Source MAC -> port is learned from every received frame; a frame goes to the port owning
//     its destination MAC, or is flooded to all other ports (broadcast/multicast/unknown).
//     The destination is looked up when the frame is sent, so replies learned meanwhile count.
//   * Every frame is stamped on reception (the kernel's receive timestamp via SO_TIMESTAMPNS,
//     converted to CLOCK_MONOTONIC, so time the switch spent waking up is not added to the
//     delay) and queued with due time rx + D.  With a constant D the queue is a FIFO ordered
//     by due time.  The loop sleeps in ppoll() with a timeout up to the head's due time (timer
//     slack 1 ns, optional SCHED_FIFO), so it never busy-spins.
//   * In this VM a timed wake-up arrives some tens of microseconds late (timer, vCPU idle exit,
//     scheduling).  The switch measures that overshoot (running average), asks to be woken that
//     much earlier and releases frames due within that margin, so on average frames leave at
//     their due time; the counters report mean/min/p50/p99/max of (release time - due time).
//     Frames due together leave one after another: each send() of a 64 KiB frame costs tens of
//     microseconds because the kernel runs the receiving host's network stack inside it, so
//     the tail of a bulk burst leaves later (much like serialisation delay on a real link).
//   * SIGINT/SIGTERM end the loop cleanly (they are blocked except inside ppoll, so there is no
//     race); SIGUSR1 prints the counters.  Counters are printed to stderr on exit.

#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

// The virtio_net_hdr that PACKET_VNET_HDR prepends to every frame (ABI from
// <linux/virtio_net.h>, which is not valid C++: it has a member named `class`).
struct VnetHdr {
  uint8_t flags;  // 1 = NEEDS_CSUM (csum_start/offset valid), 2 = DATA_VALID (rx only)
  uint8_t gso_type;
  uint16_t hdr_len;
  uint16_t gso_size;
  uint16_t csum_start;
  uint16_t csum_offset;
};
static_assert(sizeof(VnetHdr) == 10);
constexpr uint8_t VNET_F_DATA_VALID = 2;

// Largest frame we accept: a 64 KiB GSO super-frame plus Ethernet/VLAN header plus slack.
// Anything bigger is counted as dropped (truncated).
constexpr size_t kMaxFrame = 65536 + 256;
constexpr size_t kVnetHdr = sizeof(VnetHdr);
// Frames read from one port per wake-up before the other ports get their turn.
constexpr int kRxBatch = 256;

volatile sig_atomic_t g_stop = 0;
volatile sig_atomic_t g_dump = 0;

void on_signal(int sig) {
  if (sig == SIGUSR1)
    g_dump = 1;
  else
    g_stop = 1;
}

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Port {
  std::string name;
  int ifindex = 0;
  int fd = -1;
};

// One queued frame: virtio_net_hdr + Ethernet frame, exactly as read from the socket.
struct Frame {
  int64_t due_ns;
  int in_port;
  std::vector<uint8_t> bytes;
};

struct Counters {
  uint64_t rx_frames = 0, rx_bytes = 0;
  uint64_t fwd_frames = 0, fwd_bytes = 0;  // frames sent out of a port (a flood counts each copy)
  uint64_t flooded = 0;                     // received frames that were flooded
  uint64_t drop_trunc = 0;                  // frame larger than kMaxFrame
  uint64_t drop_queue = 0;                  // queue byte limit reached
  uint64_t drop_send = 0;                   // send() failed (e.g. ENOBUFS: peer backlog full)
  uint64_t drop_local = 0;                  // destination is the port it came from
  uint64_t max_queue_frames = 0, max_queue_bytes = 0;
  // How late frames leave compared with their due time (negative: early, see early_ns).
  int64_t late_sum_ns = 0, late_min_ns = INT64_MAX, late_max_ns = INT64_MIN;
  uint64_t late_n = 0;
  // Histogram of the same in 10 us buckets from -200 us to +10 ms (ends clamp), for percentiles.
  static constexpr int64_t kHistLo = -200000, kHistStep = 10000;
  static constexpr int kHistN = 1021;
  uint64_t late_hist[kHistN] = {};

  void add_late(int64_t late) {
    late_sum_ns += late;
    late_n += 1;
    late_min_ns = std::min(late_min_ns, late);
    late_max_ns = std::max(late_max_ns, late);
    late_hist[std::clamp<int64_t>((late - kHistLo) / kHistStep, 0, kHistN - 1)] += 1;
  }
  // Upper edge (us) of the bucket holding quantile q.
  double late_quantile_us(double q) const {
    uint64_t want = uint64_t(q * double(late_n)), seen = 0;
    for (int b = 0; b < kHistN; ++b) {
      seen += late_hist[b];
      if (seen > want) return double(kHistLo + (b + 1) * kHistStep) / 1e3;
    }
    return double(late_max_ns) / 1e3;
  }
};

uint64_t mac_key(const uint8_t* m) {
  uint64_t k = 0;
  for (int i = 0; i < 6; ++i) k = (k << 8) | m[i];
  return k;
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "delay_switch: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

void usage() {
  std::fprintf(stderr,
               "usage: delay_switch --delay-us D [--rt PRIO] [--max-queue-mb M] [--no-early]\n"
               "                    PORT1 PORT2 ...\n"
               "  --delay-us D       one-way delay added to every frame, microseconds (>= 0)\n"
               "  --rt PRIO          run as SCHED_FIFO with this priority (1-99; 0 = normal)\n"
               "  --max-queue-mb M   drop frames when more than M MiB are queued (default 256)\n"
               "  --no-early         do not compensate the measured wake-up latency\n");
  std::exit(2);
}

int open_port(Port& p) {
  p.ifindex = int(if_nametoindex(p.name.c_str()));
  if (p.ifindex == 0) {
    std::fprintf(stderr, "delay_switch: no such interface: %s\n", p.name.c_str());
    std::exit(1);
  }
  // Protocol 0: receive nothing until bind() names both the protocol and the interface, so no
  // frames from other interfaces slip in between socket() and bind().
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (fd < 0) die("socket(AF_PACKET)");
  int one = 1;
  if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) < 0) die("PACKET_VNET_HDR");
  if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) < 0)
    die("PACKET_IGNORE_OUTGOING");
  // Kernel receive timestamps (CLOCK_REALTIME) as a control message with every frame.
  if (setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) < 0) die("SO_TIMESTAMPNS");
  // Generous buffers so a burst (or a moment without CPU) does not drop frames.  The FORCE
  // variants need CAP_NET_ADMIN; fall back to the capped ones.
  int buf = 16 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf) < 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof buf) < 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);

  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = p.ifindex;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) < 0) die("bind(AF_PACKET)");

  packet_mreq mr{};
  mr.mr_ifindex = p.ifindex;
  mr.mr_type = PACKET_MR_PROMISC;
  if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) < 0)
    die("PACKET_ADD_MEMBERSHIP(PROMISC)");
  p.fd = fd;
  return fd;
}

void print_counters(const Counters& c, const std::vector<Port>& ports, const char* when) {
  uint64_t kdrops = 0;  // frames the kernel dropped because a socket's receive buffer was full
  for (const Port& p : ports) {
    tpacket_stats st{};
    socklen_t len = sizeof st;
    // Note: reading PACKET_STATISTICS resets the kernel's counters, hence the static total.
    if (getsockopt(p.fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) kdrops += st.tp_drops;
  }
  static uint64_t kdrops_total = 0;
  kdrops_total += kdrops;
  uint64_t dropped = c.drop_trunc + c.drop_queue + c.drop_send + c.drop_local + kdrops_total;
  char late[160] = "";
  if (c.late_n)
    std::snprintf(late, sizeof late,
                  ", release time - due time: mean %.1f us, min %.1f, p50 <%.0f, p99 <%.0f, "
                  "max %.1f us",
                  double(c.late_sum_ns) / double(c.late_n) / 1e3, double(c.late_min_ns) / 1e3,
                  c.late_quantile_us(0.5), c.late_quantile_us(0.99), double(c.late_max_ns) / 1e3);
  std::fprintf(stderr,
               "delay_switch: %s: received %llu frames (%llu bytes), forwarded %llu frames "
               "(%llu bytes), flooded %llu, dropped %llu (truncated %llu, queue-full %llu, "
               "send-error %llu, same-port %llu, kernel-rx %llu), max queue %llu frames / "
               "%llu bytes%s\n",
               when, (unsigned long long)c.rx_frames, (unsigned long long)c.rx_bytes,
               (unsigned long long)c.fwd_frames, (unsigned long long)c.fwd_bytes,
               (unsigned long long)c.flooded, (unsigned long long)dropped,
               (unsigned long long)c.drop_trunc, (unsigned long long)c.drop_queue,
               (unsigned long long)c.drop_send, (unsigned long long)c.drop_local,
               (unsigned long long)kdrops_total, (unsigned long long)c.max_queue_frames,
               (unsigned long long)c.max_queue_bytes, late);
}

}  // namespace

int main(int argc, char** argv) {
  long long delay_us = -1;
  int rt_prio = 0;
  long long max_queue_mb = 256;
  bool compensate = true;
  std::vector<Port> ports;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--delay-us") {
      char* end = nullptr;
      delay_us = std::strtoll(value(), &end, 10);
      if (*end != '\0' || delay_us < 0) usage();
    } else if (a == "--rt") {
      rt_prio = std::atoi(value());
    } else if (a == "--max-queue-mb") {
      max_queue_mb = std::atoll(value());
    } else if (a == "--no-early") {
      compensate = false;
    } else if (a == "-h" || a == "--help") {
      usage();
    } else if (!a.empty() && a[0] == '-') {
      usage();
    } else {
      ports.push_back(Port{a});
    }
  }
  if (delay_us < 0 || ports.size() < 2 || max_queue_mb < 1) usage();
  const int64_t delay_ns = delay_us * 1000;
  const uint64_t max_queue_bytes = uint64_t(max_queue_mb) << 20;

  // Block the stop/dump signals everywhere except inside ppoll(): a signal then always
  // interrupts the wait instead of being lost between checking the flag and going to sleep.
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGUSR1}) sigaction(s, &sa, nullptr);
  sigset_t blocked, wait_mask;
  sigemptyset(&blocked);
  for (int s : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&blocked, s);
  if (sigprocmask(SIG_BLOCK, &blocked, &wait_mask) < 0) die("sigprocmask");
  for (int s : {SIGINT, SIGTERM, SIGUSR1}) sigdelset(&wait_mask, s);

  // Default timer slack is 50 us, which would be added to every wake-up; ask for 1 ns.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  if (rt_prio > 0) {
    sched_param sp{};
    sp.sched_priority = rt_prio;
    if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0) {
      std::fprintf(stderr, "delay_switch: warning: SCHED_FIFO %d failed (%s), running normal\n",
                   rt_prio, std::strerror(errno));
      rt_prio = 0;
    }
  }

  std::vector<pollfd> pfds;
  for (Port& p : ports) pfds.push_back(pollfd{open_port(p), POLLIN, 0});

  std::string names;
  for (const Port& p : ports) names += (names.empty() ? "" : ",") + p.name;
  std::fprintf(stderr,
               "delay_switch: pid %d, %zu ports [%s], one-way delay %lld us, %s, queue limit "
               "%lld MiB, wake-up compensation %s\n",
               int(getpid()), ports.size(), names.c_str(), delay_us,
               rt_prio > 0 ? ("SCHED_FIFO " + std::to_string(rt_prio)).c_str() : "SCHED_OTHER",
               max_queue_mb, compensate ? "on" : "off");

  std::unordered_map<uint64_t, int> mac_to_port;
  std::deque<Frame> queue;
  uint64_t queued_bytes = 0;
  Counters c;
  std::vector<uint8_t> rxbuf(kVnetHdr + kMaxFrame);

  // Send one queued frame out of port `out`.
  auto send_to = [&](const Frame& f, int out) {
    ssize_t n;
    do {
      n = send(ports[out].fd, f.bytes.data(), f.bytes.size(), 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      ++c.drop_send;
    } else {
      ++c.fwd_frames;
      c.fwd_bytes += f.bytes.size() - kVnetHdr;
    }
  };

  // Wake-up latency compensation (see header): running average of how much later than asked
  // ppoll() returns on a timeout; we wake up that much early and release frames due within it.
  constexpr int64_t kMaxEarlyNs = 200000;
  int64_t early_ns = 0;
  int64_t last_due_ns = 0;  // due times are kept non-decreasing so the queue stays a FIFO

  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(timespec)) + 64];

  while (!g_stop) {
    // 1. Release every frame whose due time has come (within the wake-up margin).
    int64_t now = now_ns();
    while (!queue.empty() && queue.front().due_ns <= now + early_ns) {
      Frame& f = queue.front();
      c.add_late(now - f.due_ns);
      const uint8_t* eth = f.bytes.data() + kVnetHdr;
      // DATA_VALID is only meaningful on receive; do not hand it back to the kernel.
      reinterpret_cast<VnetHdr*>(f.bytes.data())->flags &= uint8_t(~VNET_F_DATA_VALID);
      bool group = eth[0] & 1;  // broadcast or multicast destination
      auto it = group ? mac_to_port.end() : mac_to_port.find(mac_key(eth));
      if (it != mac_to_port.end()) {
        if (it->second == f.in_port)
          ++c.drop_local;
        else
          send_to(f, it->second);
      } else {
        ++c.flooded;
        for (int o = 0; o < int(ports.size()); ++o)
          if (o != f.in_port) send_to(f, o);
      }
      queued_bytes -= f.bytes.size();
      queue.pop_front();
      now = now_ns();
    }

    if (g_dump) {
      g_dump = 0;
      print_counters(c, ports, "stats");
    }

    // 2. Sleep until a port is readable or the head of the queue is (almost) due.
    timespec ts{};
    timespec* timeout = nullptr;
    int64_t deadline = 0;
    if (!queue.empty()) {
      deadline = queue.front().due_ns - early_ns;
      const int64_t wait = std::max<int64_t>(0, deadline - now);
      ts.tv_sec = wait / 1000000000;
      ts.tv_nsec = wait % 1000000000;
      timeout = &ts;
    }
    int r = ppoll(pfds.data(), pfds.size(), timeout, &wait_mask);
    if (r < 0) {
      if (errno == EINTR) continue;  // signal: loop re-checks g_stop / g_dump
      die("ppoll");
    }
    if (r == 0) {
      if (compensate && deadline > now) {  // a real timed sleep: learn its overshoot
        const int64_t over = std::clamp<int64_t>(now_ns() - deadline, 0, kMaxEarlyNs);
        early_ns += (over - early_ns) / 8;
      }
      continue;
    }

    // 3. Read what arrived, stamp it, learn the source MAC, queue it.
    // Offset to convert the kernel's CLOCK_REALTIME receive stamps to CLOCK_MONOTONIC.
    timespec rt{};
    clock_gettime(CLOCK_REALTIME, &rt);
    const int64_t wake_ns = now_ns();
    const int64_t real_minus_mono = int64_t(rt.tv_sec) * 1000000000 + rt.tv_nsec - wake_ns;
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (pfds[i].revents & (POLLERR | POLLNVAL)) {
        std::fprintf(stderr, "delay_switch: error on port %s\n", ports[i].name.c_str());
        g_stop = 1;
        break;
      }
      if (!(pfds[i].revents & POLLIN)) continue;
      for (int k = 0; k < kRxBatch; ++k) {
        iovec iov{rxbuf.data(), rxbuf.size()};
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf;
        msg.msg_controllen = sizeof cbuf;
        // MSG_TRUNC makes recvmsg() return the real length, so oversized frames are detected.
        ssize_t n = recvmsg(pfds[i].fd, &msg, MSG_DONTWAIT | MSG_TRUNC);
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          die("recvmsg");
        }
        const int64_t recv_ns = now_ns();
        int64_t rx_ns = recv_ns;
        for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
          if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
            timespec kts;
            std::memcpy(&kts, CMSG_DATA(cm), sizeof kts);
            const int64_t k_ns =
                int64_t(kts.tv_sec) * 1000000000 + kts.tv_nsec - real_minus_mono;
            // Trust it only if plausible (a clock step would make it nonsense).
            if (k_ns <= recv_ns && k_ns > recv_ns - 100000000) rx_ns = k_ns;
          }
        }
        if (size_t(n) < kVnetHdr + ETH_HLEN) continue;  // runt, ignore
        if (size_t(n) > rxbuf.size()) {
          ++c.drop_trunc;
          continue;
        }
        ++c.rx_frames;
        c.rx_bytes += size_t(n) - kVnetHdr;
        const uint8_t* eth = rxbuf.data() + kVnetHdr;
        const uint8_t* src = eth + 6;
        if (!(src[0] & 1)) mac_to_port[mac_key(src)] = int(i);
        if (queued_bytes + size_t(n) > max_queue_bytes) {
          ++c.drop_queue;
          continue;
        }
        last_due_ns = std::max(last_due_ns, rx_ns + delay_ns);
        queue.push_back(Frame{last_due_ns, int(i),
                              std::vector<uint8_t>(rxbuf.begin(), rxbuf.begin() + n)});
        queued_bytes += size_t(n);
        if (queue.size() > c.max_queue_frames) c.max_queue_frames = queue.size();
        if (queued_bytes > c.max_queue_bytes) c.max_queue_bytes = queued_bytes;
      }
    }
  }

  if (!queue.empty())
    std::fprintf(stderr, "delay_switch: discarding %zu queued frames on exit\n", queue.size());
  print_counters(c, ports, "exit");
  for (const Port& p : ports) close(p.fd);
  return 0;
}
