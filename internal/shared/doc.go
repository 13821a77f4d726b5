// Package shared is the one place that knows which of this process's sockets
// another process holds too, as the handoff itself (not a /proc scan) tells
// it: a socket handed to a successor, one received from a predecessor while
// the predecessor serves it, one that systemd keeps (socket activation).
// Package handoff writes it; package drain reads it, and releases such a
// socket (closes its fd) instead of shutting it down, which would stop it
// listening in every process that holds it.
//
// A socket is known by the identity fstat gives it (device and inode), which
// every fd of it shares in every process, so a dup or a FileListener of a
// marked fd is marked too. Marks live for the process's life unless Unmark
// removes them; socket inodes are not reused while a process lives in
// practice (they come from a 64-bit counter).
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package shared
