package netnstest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A signal that reaches the thread blocked in the fake systemd's recvmsg
// (the Go runtime sends SIGURG to preempt) does not fail the receive: with
// SO_RCVTIMEO set the kernel does not restart it and it returns EINTR, which
// failed handoff/systemd's TestRestartThroughFDStore once in CI ("fake
// systemd: recvmsg: interrupted system call"). Needs no privilege.
func TestNotifyRecvInterrupted(t *testing.T) {
	sd := ListenNotify(t, filepath.Join(t.TempDir(), "notify"))
	type got struct {
		msg string
		err error
	}
	tid := make(chan int, 1)
	done := make(chan got, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid <- unix.Gettid()
		rec := &fatalRecorder{TB: t}
		defer func() { done <- got{rec.msg, rec.err} }()
		rec.msg, _ = sd.Recv(rec)
	}()
	target := <-tid
	// Signal the receiving thread for 300 ms while it waits, then send.
	for i := 0; i < 30; i++ {
		if err := unix.Tgkill(os.Getpid(), target, unix.SIGURG); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(c)
	if err := unix.Sendto(c, []byte("READY=1"), 0, &unix.SockaddrUnix{Name: sd.Addr}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.msg != "READY=1" {
			t.Fatalf("recvmsg = %q, %v; want READY=1 despite the signals", r.msg, r.err)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("recvmsg did not return")
	}
}

// fatalRecorder is the TB of a goroutine that is not the test's: Fatalf
// records the failure and ends the goroutine.
type fatalRecorder struct {
	testing.TB
	msg string
	err error
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.err = fmt.Errorf(format, args...)
	runtime.Goexit()
}
