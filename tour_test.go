package zerodrop_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/reuseport"
)

// Example_tour is the README's tour, as written (compile-only: it serves
// until signalled).
func Example_tour() {
	ctx := context.Background()
	mux := http.NewServeMux()

	// zerodrop.Serve, the one call: take the listeners from the predecessor on the
	// handoff socket, else from systemd socket activation, else listen fresh;
	// serve; start a successor (this executable again) on SIGHUP; drain once the
	// successor serves, or on SIGTERM; report.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	rep, err := zerodrop.Serve(ctx, srv, []string{":8080"}, zerodrop.Options{
		Config: zerodrop.Config{
			Handoff:   handoff.Config{Path: "/run/myapp/handoff.sock"}, // its directory: writable by us only
			Successor: zerodrop.ReExec,                                 // SIGHUP starts this executable again
		},
		ReadyPath: "/ready", // 200 while serving, 503 once draining
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("generation %d stopped (%s): %+v", rep.Generation, rep.Cause, rep.Drains[0])

	// A deploy tool (or `zerodrop upgrade`) starts the successor and returns
	// once it serves the handoff socket, or with the reason it does not.
	res, err := handoff.Upgrade(ctx, "/run/myapp/handoff.sock", func() error {
		return exec.Command("/usr/local/bin/myapp").Start()
	})
	log.Printf("generation %d -> %d (pid %d): %v", res.From, res.To, res.PID, err)

	// The parts, on their own. reuseport: one explicit option set, checked,
	// read back from the kernel.
	cfg := reuseport.Config{
		Migration: reuseport.MigrationRequire, // ErrMigrationDisabled names the sysctl command
		Options:   reuseport.Options{Backlog: 1024, NoDelay: true},
	}
	l, err := cfg.Listen(ctx, "tcp", ":8081") // *reuseport.Listener: a *net.TCPListener
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(l.Digest(), l.Adjustments()) // e.g. backlog clamped to somaxconn

	// drain: stop listening without losing the queue, then serve what was accepted.
	ds := &drain.Server{HTTP: &http.Server{Handler: mux}}
	go ds.Serve(l)
	report, err := ds.Shutdown(ctx) // queued, migrated, accepted, remainder, forced
	log.Printf("%+v %v", report, err)
}

// TestREADMETour: the README's tour is Example_tour's body, so it compiles.
func TestREADMETour(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("tour_test.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## A tour of the API\n\n```go\n(.*?)```").FindSubmatch(readme)
	f := regexp.MustCompile(`(?s)\nfunc Example_tour\(\) \{\n(.*?)\n\}\n`).FindSubmatch(src)
	if m == nil || f == nil {
		t.Fatalf("tour found in README: %v; Example_tour found: %v", m != nil, f != nil)
	}
	var body []string
	for _, l := range strings.Split(string(f[1]), "\n") {
		body = append(body, strings.TrimPrefix(l, "\t"))
	}
	if got, want := strings.Join(body, "\n")+"\n", string(m[1]); got != want {
		t.Errorf("README tour and Example_tour differ:\nREADME:\n%s\nExample_tour:\n%s", want, got)
	}
}
