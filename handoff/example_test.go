package handoff_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/zerodrop/zerodrop/handoff"
)

// A server that upgrades without closing its listening socket. Run the new
// binary (for example from a deploy script, through Upgrade) while this one
// serves: it inherits the listener, and this one drains and exits.
// Compile-only: it waits for a successor, another process, and its paths
// under /run are root's (Example_generations runs the mechanism in one
// process).
func Example() {
	ctx := context.Background()
	u, err := handoff.New(ctx, handoff.Config{Path: "/run/app/handoff.sock", PIDFile: "/run/app/app.pid"})
	if err != nil {
		log.Fatal(err)
	}
	defer u.Close()
	ln, err := u.Listen(ctx, "http", "tcp", ":8080")
	if err != nil {
		log.Fatal(err)
	}
	gen := u.Generation()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Generation", fmt.Sprint(gen)) // verify from outside which generation serves
	})}
	go srv.Serve(ln)
	if err := u.Ready(); err != nil {
		log.Fatal(err)
	}
	<-u.Exit()              // a successor is ready
	ln.Close()              // stop accepting first (the successor holds the socket)...
	time.Sleep(time.Second) // ...let accepted requests be read and answered (see drain/)...
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	srv.Shutdown(sctx) // ...then shut down
}

// A deploy step that returns only when the new generation serves.
// Compile-only: it needs a server on the socket and a new binary to start,
// other processes.
func ExampleUpgrade() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := handoff.Upgrade(ctx, "/run/app/handoff.sock", func() error {
		cmd := exec.Command("/usr/local/bin/app")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		return cmd.Start()
	})
	if err != nil {
		log.Fatal(err) // e.g. "upgrade: generation 4 still serves: waiting for ready: EOF"
	}
	fmt.Printf("generation %d -> %d (pid %d) in %v\n", res.From, res.To, res.PID, res.Took)
}

// Two generations in one process, to show the mechanism: the second inherits
// the first's listening socket (the same address, the same kernel socket),
// and the first's Exit closes once the second is ready.
func Example_generations() {
	dir, err := os.MkdirTemp("", "handoff-example-") // 0700: only we can write it
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	cfg := handoff.Config{Path: filepath.Join(dir, "handoff.sock")}

	first, err := handoff.New(ctx, cfg) // nobody answers: generation 1, fresh sockets
	if err != nil {
		log.Fatal(err)
	}
	defer first.Close()
	ln1, err := first.Listen(ctx, "http", "tcp4", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln1.Close()
	if err := first.Ready(); err != nil {
		log.Fatal(err)
	}

	second, err := handoff.New(ctx, cfg) // the first answers: generation 2
	if err != nil {
		log.Fatal(err)
	}
	defer second.Close()
	ln2, err := second.Listen(ctx, "http", "tcp4", ln1.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer ln2.Close()
	if err := second.Ready(); err != nil {
		log.Fatal(err)
	}
	<-first.Exit()
	fmt.Printf("generations %d and %d; same address: %v\n", first.Generation(), second.Generation(), ln1.Addr().String() == ln2.Addr().String())
	// Output: generations 1 and 2; same address: true
}
