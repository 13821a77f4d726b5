package zerodrop_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"

	"github.com/zerodrop/zerodrop"
)

// A server that serves until its ctx ends, then drains. With Options.Handoff
// set, a second process started with the same options would take its
// listener over instead, and this one would drain when it is ready.
func ExampleServe() {
	ctx, cancel := context.WithCancel(context.Background())
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello\n")
	})}
	rep, err := zerodrop.Serve(ctx, srv, []string{"127.0.0.1:0"}, zerodrop.Options{
		OnServing: func(gen uint64, addrs []net.Addr) {
			defer cancel() // stop once we have been answered
			resp, err := http.Get("http://" + addrs[0].String() + "/")
			if err != nil {
				log.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			fmt.Printf("generation %d answered %s", gen, b)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	d := rep.Drains[0]
	fmt.Printf("stopped: %s; queued connections lost: %d; requests cut: %d\n", rep.Cause, d.Remainder, len(d.HTTP.Forced))
	// Output:
	// generation 1 answered hello
	// stopped: context canceled; queued connections lost: 0; requests cut: 0
}
