package steer_test

import (
	"context"
	"fmt"
	"log"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
)

// A worker joins the group of its address, serves, and retires its listener
// without losing a queued connection, whatever net.ipv4.tcp_migrate_req says.
// (Needs root and a bpf filesystem: compile-only.)
func ExampleConfig_Join() {
	ctx := context.Background()
	l, err := reuseport.Listen(ctx, "tcp4", "127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	cfg := &steer.Config{} // pins under steer.DefaultDir
	m, err := cfg.Join(ctx, l)
	if err != nil {
		l.Close()
		log.Fatal(err)
	}
	// ... serve l ...

	// Drain: no new connections from now on; accept what is queued (the
	// serving loop keeps accepting), give handshakes in flight a grace period.
	if err := m.SetDraining(true); err != nil {
		log.Print(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if q, err := l.Queue(); err != nil || q.Len == 0 {
			break
		}
	}
	time.Sleep(20 * time.Millisecond)
	l.Close() // what is still queued migrates to a live member of the same class
	m.Close() // after the listener: the last member removes the pins
}

// A supervisor opens the group without joining it, shifts 10% of new
// connections to a new generation in slot 3, and reads the counters.
// (Needs root, a bpf filesystem and a group that workers joined:
// compile-only.)
func ExampleGroup_Slots() {
	g, err := (&steer.Config{}).Open(context.Background(), "127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	slots, err := g.Slots()
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range slots {
		if s.State == steer.Free {
			continue
		}
		w := uint32(90)
		if s.Index == 3 {
			w = 10
		}
		if err := g.SetWeight(s.Index, w); err != nil {
			log.Print(err)
		}
		fmt.Printf("slot %d %s class %d: %+v\n", s.Index, s.State, s.Class, s.Counters)
	}
}

// Marker is what package drain needs from a steering group: both *Group and
// *Member provide it.
type Marker interface {
	MarkDraining(syscall.Conn) error
}

var (
	_ Marker = (*steer.Group)(nil)
	_ Marker = (*steer.Member)(nil)
)
