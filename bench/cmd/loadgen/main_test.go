package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/load"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo server, restarted the naive way under load: the restarts are
// marked, and several generations serve. 3 s of load for restarts every
// 200 ms: at load 25 a 700 ms run saw two restarts marked and only the
// first generation answer.
func TestDemoRestarts(t *testing.T) {
	var out bytes.Buffer
	cfg := load.Config{Concurrency: 4, Duration: 3 * time.Second, Header: "X-Generation"}
	if err := run(t.Context(), &out, cfg, 200*time.Millisecond, true); err != nil {
		t.Fatal(err)
	}
	var res load.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v in %s", err, out.Bytes())
	}
	if len(res.Marks) < 2 || len(res.Headers) < 2 || res.Requests == 0 {
		t.Errorf("%d marks, generations %v, %d requests; want 2 or more marks and generations",
			len(res.Marks), res.Headers, res.Requests)
	}
}

func TestReport(t *testing.T) {
	var out bytes.Buffer
	cfg := load.Config{Requests: 20, Header: "X-Generation"}
	if err := run(t.Context(), &out, cfg, 0, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"20 requests", "0 failed", "steady", `header "1": 20 replies`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRestartNeedsDemo(t *testing.T) {
	cfg := load.Config{URL: "http://127.0.0.1:1/"}
	if err := run(t.Context(), &bytes.Buffer{}, cfg, time.Second, false); err == nil {
		t.Error("-restart-every with -url: no error")
	}
}
