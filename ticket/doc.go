// Package ticket owns the TLS session-ticket keys of a service across its
// generations, so that a client that reconnects after a restart resumes its
// session (a PSK handshake in TLS 1.3, a ticket in TLS 1.2) instead of doing a
// full handshake.
//
// # How it works
//
// crypto/tls encrypts session tickets with the first of its session-ticket
// keys and decrypts them with any (tls.Config.SetSessionTicketKeys). By
// default each process draws its own random keys, so the tickets a
// predecessor issued are worthless to its successor. A Keys holds the keys of
// the lineage: the first generation draws one (New); each generation hands
// its keys to its successor (Export, Import), and its tls.Config issues and
// accepts tickets with them (Install).
//
// Rotation: the first key encrypts until it is RotateEvery old (24 hours by
// default, as crypto/tls rotates its own), then a fresh key takes its place
// and the old one only decrypts, for Lifetime (7 days by default, the longest
// a crypto/tls ticket lives) after it stopped encrypting; then it is dropped
// and zeroed. A restart does not rotate by itself: the successor encrypts
// with the predecessor's key while it is young, so that the number of keys
// does not grow with the number of restarts. The configs of Install check
// before each ticket they issue whether a rotation is due (Refresh), and use
// the keys of the moment, whichever clone of the config serves (Install sets
// the config's WrapSession and UnwrapSession hooks, which clones share): no
// goroutine, no ticker. At most MaxKeys keys are kept; the oldest goes first.
//
// With package handoff, Config.TicketKeys hands the keys over with the
// sockets; zerodrop.Serve does it for any srv with a TLSConfig.
//
// # Security
//
// The keys are secrets: whoever has them can decrypt every ticket issued
// under them, and with it the resumption secret of those sessions. So:
//
//   - They never travel in a frame, a file or an environment variable. Export
//     writes them into a memfd (memfd_create, close-on-exec, never linked
//     into any file system), sealed against writing, growing and shrinking
//     (and further sealing) before it is handed on, and package handoff sends
//     that fd over the handoff socket only (SCM_RIGHTS), after the peer
//     passed its credential checks (SO_PEERCRED: our UID or one of
//     AllowUIDs). Import accepts only a memfd with those seals, of a size
//     that matches its header. The pages of a memfd are anonymous memory: they
//     reach a disk only through swap (a service that must exclude that too
//     locks its memory or runs without swap).
//   - They are never logged, formatted or marshalled: Keys has no exported
//     field and its String method says how many keys it holds, not what.
//   - Close zeroes every key; a key dropped by rotation is zeroed when it is
//     dropped; Export and Import zero their buffers, and package handoff
//     closes the memfd once sent or read (its pages are freed with the last
//     fd; the kernel zeroes a page before it hands it out again). Go cannot
//     promise that no copy survives elsewhere: crypto/tls derives keys of
//     its own from ours (in a config only Keys holds) and does not zero
//     them; Close replaces them by a random key and leaves the old ones to
//     the garbage collector.
//
// # systemd
//
// A systemd restart (stop, then start) has no predecessor to hand over to.
// The keys are kept where the sockets are kept: in the service's file
// descriptor store. zerodrop.Serve (Generation.Ready, and Stopping at a stop
// that is not a handoff) puts the sealed memfd of Export there (FDSTORE=1,
// FDNAME=zerodrop-tickets, our own sendmsg since go-systemd cannot attach an
// fd: coreos/go-systemd#442), replacing the one stored before
// (FDSTOREREMOVE=1 first: each Export is a new file, which systemd would
// keep beside the old). At the next start systemd passes it back among the
// activated fds (LISTEN_FDNAMES); handoff/systemd.Activated accepts it only
// if Check does (a memfd named FDName, sealed, of a size of the format),
// Activation.Tickets hands it out, and Import reads it. The unit needs
// FileDescriptorStoreMax= of at least its stored sockets plus one (with 0,
// systemd drops the message and a restart draws fresh keys: a full
// handshake per client, as before). A process that dies without a stop
// (a crash, the watchdog's kill) leaves the keys of its last Ready: tickets
// issued under a key rotated in since then need a full handshake.
//
// How the keys are kept, then: in memory only. They live in the serving
// process, and between two processes in the pages of a sealed memfd that
// systemd (PID 1) holds open; no file system has them, nothing writes them
// to disk in the clear (anonymous memory reaches a disk only through swap).
// Who can read them: root, and processes that may ptrace the service or
// systemd (they can read the fds, /proc/PID/fd/N, or the memory); a process
// of another user cannot. The store lives as long as the unit is not
// stopped for good: "systemctl stop" empties it (FileDescriptorStorePreserve=
// of systemd 254+ can change that), so a stop then start draws fresh keys.
// We prefer this to keys derived from a key the unit supplies as a credential
// (LoadCredentialEncrypted=): that key lives on disk (encrypted to the host
// or TPM), and keys derived from it rotate only when the unit's file
// changes. A reload through handoff hands the keys over the handoff socket
// instead, as above.
package ticket
