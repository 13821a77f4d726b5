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
// The design for it keeps the keys where the sockets are kept: the stopping
// process puts the sealed memfd of Export in the service's file descriptor
// store (systemd.Notifier.Store accepts the *os.File: FDSTORE=1,
// FDNAME=zerodrop-tickets; the unit needs FileDescriptorStoreMax= of at least
// the sockets plus one), and the next start finds it among its activated fds
// (LISTEN_FDNAMES) and passes it to Import. systemd holds the fd in memory
// only: nothing is written to disk in the clear; each stop would replace the
// stored memfd (FDSTOREREMOVE=1, then FDSTORE=1). We prefer this to keys
// derived from a key the unit supplies as a credential
// (LoadCredentialEncrypted=): that key lives on disk (encrypted to the host
// or TPM), and keys derived from it rotate only when the unit's file
// changes. Not done yet: the reading
// side. handoff/systemd.Activated refuses any passed fd that is not a socket
// (ErrNotSocket), so a memfd in the store would fail the next start; it must
// learn to hand out the fd named zerodrop-tickets as a file (checked by
// Import, not as a socket), and zerodrop.Serve to store it at a stop that is
// not a handoff. Until then a systemd restart starts with fresh keys (a full
// handshake per client, as before); a reload through handoff keeps them.
package ticket
