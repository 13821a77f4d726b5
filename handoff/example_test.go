package handoff_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/zerodrop/zerodrop/handoff"
)

// A server that upgrades without closing its listening socket. Run the new
// binary (for example from a deploy script, through Upgrade) while this one
// serves: it inherits the listener, and this one drains and exits.
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
