package reuseport_test

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/zerodrop/zerodrop/reuseport"
)

// benchAccept measures accepts per second on l, with dialers on loopback.
func benchAccept(b *testing.B, l net.Listener) {
	defer l.Close()
	addr := l.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var d net.Dialer
			for ctx.Err() == nil {
				if c, err := d.DialContext(ctx, "tcp4", addr); err == nil {
					c.Close()
				}
			}
		}()
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := l.Accept()
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
	b.StopTimer()
	cancel()
	l.Close()
	wg.Wait()
}

// BenchmarkAccept compares a reuseport.Listener with net.Listen (plain TCP, so
// that the kernel path is the same) side by side in one run.
func BenchmarkAccept(b *testing.B) {
	b.Run("net.Listen", func(b *testing.B) {
		var lc net.ListenConfig
		lc.SetMultipathTCP(false)
		l, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		benchAccept(b, l)
	})
	b.Run("reuseport.Listen", func(b *testing.B) {
		l, err := reuseport.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		benchAccept(b, l)
	})
}
