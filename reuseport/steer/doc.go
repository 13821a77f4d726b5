// Package steer gives a reuseport group a kernel program that decides which
// member gets each connection: lossless drains without net.ipv4.tcp_migrate_req,
// a migration policy that respects option classes, and weighted traffic shifts;
// and, for QUIC over UDP, which generation's socket gets each datagram (see
// QUIC).
//
// # How it works
//
// The first member to Join loads a BPF_PROG_TYPE_SK_REUSEPORT program (expected
// attach type BPF_SK_REUSEPORT_SELECT_OR_MIGRATE, written with cilium/ebpf's asm
// package: no clang) and its maps, and pins them under
// Config.Dir/<netns inode>/<ip>-<port> (127_0_0_1-8080: bpffs refuses dots). Later members, in any process, open the
// pins. Each member takes a slot: its socket goes into a REUSEPORT_SOCKARRAY,
// and the slot table says whether it is Live or Draining, its option class
// (ClassOf its reuseport.Digest), its weight and its reported load. The program
// is attached to the group with SO_ATTACH_REUSEPORT_EBPF. A lock (flock on the
// pin directory) serialises changes between processes.
//
// For a new connection the program picks a Live slot at random with
// probability weight/sum of the Live weights (BalanceWeighted), or does so
// among the Live slots with the lowest reported load (BalanceLeastLoaded). For a connection that a closing
// listener leaves in its queue (established, or a handshake that completes
// later) it picks, among the Live slots of the closing listener's class, one
// with the lowest load; with no such slot it returns SK_DROP (the client is
// reset; the kernel counts TCPMigrateReqFailure) or lets the kernel's hash
// choose (MismatchHash). With the program attached, migration happens whatever
// tcp_migrate_req says. If the kernel refuses a selection (a slot whose socket
// is gone) the program tries the next candidate, or for a new connection
// leaves the choice to the hash.
//
// # Draining
//
// To retire a member: Member.SetDraining(true) (or Group.MarkDraining), accept
// until its queue is empty and a grace period for handshakes in flight has
// passed, close the listener, then Member.Close. New connections go to the
// other Live members from the moment the slot is marked; what is left at close
// migrates to a Live member of the same class.
//
// # Counters
//
// Per slot, in a per-CPU map: new connections steered to it, connections
// migrated in and out, and migrating connections dropped. Group.Slots reads
// them with the slot table.
//
// # Cleanup
//
// The kernel removes a closed socket from the sockarray; Join and Group.Prune
// free the slots whose socket is gone (a process that died). The last member to
// Close removes the pins.
//
// # QUIC
//
// Config.JoinQUIC steers UDP instead, for a QUIC server restarted one
// generation at a time, each in a process with a UDP socket of its own on the
// same port (one reuseport group). The server-issued connection IDs carry
// the generation's low byte at a fixed place (quicdrain.CIDGenOffset of
// quicdrain.CIDLen bytes, with quicdrain.ListenSteered); a group of its own (pinned under
// Config.Dir/<netns inode>/udp-<ip>-<port>) holds a REUSEPORT_SOCKARRAY
// indexed by that byte, and a program that reads it from each datagram (a
// short header's DCID at byte 1, of the server's length; a long header's
// DCID length at byte 5, its DCID at byte 6) and selects that generation's
// socket. So every generation reads its own connections' datagrams on its
// own socket, from the kernel: no datagram crosses processes.
//
// An Initial or 0-RTT packet may carry a DCID the client chose, which may
// look like anything, so the program routes those by client instead: the
// kernel's hash of the datagram's addresses and ports, and the client's
// SCID. The first Initial of a client goes to the newest generation (the
// last to join) and an LRU map remembers the client's generation; its later
// Initials (the second datagram of a ClientHello, ACKs once it heard from
// the server) go to the same generation, even if the newest changed in
// between, for 10 s after the last one. A datagram too short to read, of an
// unknown version, or naming a generation without socket (it exited, or the
// byte is forged) goes to the newest: the program cannot check what the
// server's IDs may carry beyond the generation (such as quicdrain's tag), so
// the server must drop, without a stateless reset, what it does not know.
// QUICMember.Counters counts, per generation, what went where and why.
//
// A generation that dies (crash, SIGKILL) with connections left loses them:
// the kernel takes its socket out of the sockarray, their datagrams go to the
// newest, which drops them (quicdrain counts them in Stats.Unknown) without
// a stateless reset; their clients notice at their idle timeout and
// reconnect, to the newest (TestSteeredOldGenerationCrashed in quicdrain).
// The group's pins stay until the last member closes; a later JoinQUIC
// reuses them.
//
// Limits: 256 generations at most alive at once (the byte wraps); a flood of
// Initials evicts remembered clients (the map holds 8192), whose
// later Initials then go to the newest, as do those of a client that changes
// its address or port during its handshake, or pauses it for more than 10 s;
// a client that reuses its address, port and SCID (an empty one, often) for
// a new connection within 10 s of an Initial of the old one lands on the old
// one's generation.
//
// # Kernel and privileges
//
// Linux 5.14+ (migration selection); needs CAP_BPF and CAP_NET_ADMIN, or root,
// and a bpf filesystem at Config.Dir (mount -t bpf bpf /sys/fs/bpf). Without
// them the errors match ErrPermission (and os.ErrPermission) or ErrNoBPFFS.
// MPTCP listeners cannot run reuseport programs (EOPNOTSUPP): Join refuses them
// with an error matching reuseport.ErrNotSupported. JoinQUIC takes UDP
// sockets only, Join TCP listeners only. JoinQUIC needs the same kernel
// (5.14+: the program's expected attach type, BPF_SK_REUSEPORT_SELECT; the
// rest, reuseport programs for UDP and bpf_skb_load_bytes in them, is from
// 4.19) and the same capabilities; measured on 6.18.
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package steer
