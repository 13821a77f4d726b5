package systemd_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/zerodrop/zerodrop/handoff/systemd"
	"github.com/zerodrop/zerodrop/reuseport"
)

// A service started by systemd takes its listener by name, checks its options
// against the ones it would use itself, and falls back to listening when it
// was not socket-activated. (Compile-only: it needs systemd's environment.)
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
// LISTEN_FDS with its accept queue intact. (Compile-only.)
func ExampleNotifier_Store() {
	l, err := reuseport.Listen(context.Background(), "tcp", ":8080")
	if err != nil {
		log.Fatal(err)
	}
	n := systemd.FromEnv()
	if err := n.Store("http", l); err != nil {
		log.Fatal(err) // needs FileDescriptorStoreMax= in the unit
	}
	fmt.Println("stored")
}

// The notifications of one handoff, as the running generation sends them.
// (Compile-only.)
func ExampleNotifier_MainPID() {
	n := systemd.FromEnv()
	successor := 4242 // started by this process, serving the same socket
	for _, err := range []error{
		n.Reloading("generation 2 starting"),
		n.MainPID(successor), // needs NotifyAccess=all if the successor sends it
		n.Ready("generation 2 serving"),
		n.Stopping("generation 1 draining"),
	} {
		if err != nil {
			log.Print(err)
		}
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
