package systemd_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/handoff/systemd"
	"github.com/zerodrop/zerodrop/reuseport"
)

// A service started by systemd takes its listener by name, checks its options
// against the ones it would use itself, and falls back to listening when it
// was not socket-activated. Compile-only: it needs the environment and fds
// systemd passes (LISTEN_PID, LISTEN_FDS, fds from 3), which a test process
// is not started with, and then it serves until killed.
func ExampleActivated() {
	ctx := context.Background()
	cfg := &reuseport.Config{}
	act, err := systemd.Activated()
	if err != nil {
		log.Fatal(err) // a bad LISTEN_* variable or fd: refuse to start
	}
	defer act.Close() // fds not taken
	var l net.Listener
	if act != nil {
		l, err = act.Listener(ctx, "http", "tcp", "", cfg)
	} else {
		l, err = cfg.Listen(ctx, "tcp", ":8080")
	}
	if err != nil {
		log.Fatal(err)
	}
	n := systemd.FromEnv()
	if err := n.Ready("generation 1 serving " + l.Addr().String()); err != nil {
		log.Print(err)
	}
	log.Fatal(http.Serve(l, nil))
}

// Keeping a listener in systemd's fd store, so a restart finds it in
// LISTEN_FDS with its accept queue intact. Under systemd the Notifier is
// systemd.FromEnv() and the unit needs FileDescriptorStoreMax=; here a
// socket of ours stands in for systemd's and receives the message and the fd.
func ExampleNotifier_Store() {
	l, err := reuseport.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close() // still ours: Store sends a duplicate
	sock, read, done := standIn()
	defer done()

	n := &systemd.Notifier{Socket: sock} // systemd.FromEnv() under systemd
	if err := n.Store("http", l); err != nil {
		log.Fatal(err) // under systemd, FileDescriptorStoreMax=0 drops it silently
	}
	msg, fds := read()
	fmt.Printf("%s\nfds attached: %d\n", msg, fds)
	// Output:
	// FDSTORE=1
	// FDNAME=http
	// fds attached: 1
}

// The notifications of one handoff, as the running generation sends them
// (here to a socket of ours standing in for systemd's). MONOTONIC_USEC is
// the time of the reload, which changes with every run: it is printed
// without its value.
func ExampleNotifier_MainPID() {
	sock, read, done := standIn()
	defer done()
	n := &systemd.Notifier{Socket: sock} // systemd.FromEnv() under systemd
	successor := 4242                    // started by this process, serving the same socket
	for _, err := range []error{
		n.Reloading("generation 2 starting"),
		n.MainPID(successor), // needs NotifyAccess=all if the successor sends it
		n.Ready("generation 2 serving"),
		n.Stopping("generation 1 draining"),
	} {
		if err != nil {
			log.Fatal(err)
		}
		msg, _ := read()
		lines := strings.Split(msg, "\n")
		for i, line := range lines {
			if v, ok := strings.CutPrefix(line, "MONOTONIC_USEC="); ok && v != "" {
				lines[i] = "MONOTONIC_USEC=(now)"
			}
		}
		fmt.Println(strings.Join(lines, " "))
	}
	// Output:
	// RELOADING=1 MONOTONIC_USEC=(now) STATUS=generation 2 starting
	// MAINPID=4242
	// READY=1 STATUS=generation 2 serving
	// STOPPING=1 STATUS=generation 1 draining
}

// standIn is a notify socket of ours standing in for systemd's: its path,
// a read of the next datagram (its text and how many fds came with it,
// closed), and the cleanup.
func standIn() (path string, read func() (string, int), done func()) {
	dir, err := os.MkdirTemp("", "notify-example-")
	if err != nil {
		log.Fatal(err)
	}
	path = filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		os.RemoveAll(dir)
		log.Fatal(err)
	}
	read = func() (string, int) {
		buf, oob := make([]byte, 4096), make([]byte, syscall.CmsgSpace(4*4))
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		k, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
		if err != nil {
			log.Fatal(err)
		}
		msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			log.Fatal(err)
		}
		n := 0
		for i := range msgs {
			fds, err := syscall.ParseUnixRights(&msgs[i])
			if err != nil {
				log.Fatal(err)
			}
			for _, fd := range fds {
				syscall.Close(fd) // systemd would keep it
			}
			n += len(fds)
		}
		return string(buf[:k]), n
	}
	return path, read, func() {
		conn.Close()
		os.RemoveAll(dir)
	}
}

// What a Notifier sends: one datagram per message to the notify socket,
// which systemd reads (here a socket of ours stands in for it).
func ExampleNotifier() {
	dir, err := os.MkdirTemp("", "notify-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	n := &systemd.Notifier{Socket: sock} // systemd.FromEnv() under systemd
	if err := n.Ready("generation 1 serving :8080"); err != nil {
		log.Fatal(err)
	}
	buf := make([]byte, 4096)
	k, err := conn.Read(buf)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", buf[:k])
	// Output:
	// READY=1
	// STATUS=generation 1 serving :8080
}
