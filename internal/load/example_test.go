package load_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/zerodrop/zerodrop/internal/load"
)

func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Generation", "1")
	}))
	defer srv.Close()

	g, err := load.New(load.Config{URL: srv.URL, Concurrency: 4, Requests: 100, Header: "X-Generation"})
	if err != nil {
		fmt.Println(err)
		return
	}
	g.Mark("restart") // before Run: counts as at its start
	res, err := g.Run(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Requests, "requests,", res.Failed, "failed, generation 1 served", res.Headers["1"])
	fmt.Println("mark:", res.Marks[0].Name, res.Marks[0].AtMS)
	// Output:
	// 100 requests, 0 failed, generation 1 served 100
	// mark: restart 0
}
