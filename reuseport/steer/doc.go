// Package steer gives a reuseport group a kernel program that decides which
// member gets each connection: lossless drains without net.ipv4.tcp_migrate_req,
// a migration policy that respects option classes, and weighted traffic shifts.
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
// # Kernel and privileges
//
// Linux 5.14+ (migration selection); needs CAP_BPF and CAP_NET_ADMIN, or root,
// and a bpf filesystem at Config.Dir (mount -t bpf bpf /sys/fs/bpf). Without
// them the errors match ErrPermission (and os.ErrPermission) or ErrNoBPFFS.
// MPTCP listeners cannot run reuseport programs (EOPNOTSUPP): Join refuses them
// with an error matching reuseport.ErrNotSupported. TCP only.
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package steer
