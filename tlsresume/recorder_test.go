package tlsresume

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/tlstest"
)

// startTLSServer starts an HTTPS server answering "name path" whose
// connections run over the Recorders of one Capture.
func startTLSServer(t *testing.T, name string) *tlstest.Server[*Recorder] {
	t.Helper()
	var capture Capture
	return tlstest.StartServer(t, name, capture.Config, capture.Wrap)
}

// prove waits (bounded) until r proves, and returns the last error if not.
func prove(r *Recorder) error {
	return tlstest.Retry(r.ProveIdleHTTP)
}

// get fetches path on the client's connection, and returns the body and the
// client's local address of the connection used.
func get(t *testing.T, c *http.Client, url string) (string, string) {
	t.Helper()
	var local string
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { local = i.Conn.LocalAddr().String() }}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), "GET", url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b)), local
}

// post sends body to url on the client's connection, as a POST of the
// length given (-1: unknown, sent chunked), and returns the response body.
func post(t *testing.T, c *http.Client, url, body string, length int64) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, io.NopCloser(strings.NewReader(body)))
	req.ContentLength = length
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestHandOverInProcess: an idle HTTPS/1.1 keep-alive connection of Go's
// http.Transport is proven, taken from net/http and crypto/tls, and served
// on by Conn from the State: the client's next requests reuse the same
// connection and see no handshake; the second handover (from Conn's side)
// is the drain's concern, not tested here. The last request before the
// handover has no body, a body of a known length, or a chunked one (its
// end is found by following the framing: before, a request with a body
// was never proven).
func TestHandOverInProcess(t *testing.T) {
	body := strings.Repeat("a body\r\n\r\n", 700) + "end" // crosses records, holds what ends a head
	for _, last := range []struct {
		name   string
		length int64 // -2: a GET
	}{{"GET", -2}, {"POST Content-Length", int64(len(body))}, {"POST chunked", -1}} {
		t.Run(last.name, func(t *testing.T) {
			netnstest.CheckLeaks(t)
			s := startTLSServer(t, "first")
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.Cert.Pool, MinVersion: tls.VersionTLS13}, MaxIdleConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			url := "https://" + s.Addr
			for i := range 3 {
				body, _ := get(t, c, fmt.Sprintf("%s/%d", url, i))
				if body != fmt.Sprintf("first /%d", i) {
					t.Fatalf("body %q", body)
				}
			}
			_, local := get(t, c, url+"/last")
			if last.length != -2 {
				if got := post(t, c, url+"/post", body, last.length); got != "first /post" {
					t.Fatalf("POST: %q", got)
				}
			}
			r := s.Rec(t, 0)
			raw, st := tlstest.Take(t, r)
			if st.ReadSeq == 0 || st.WriteSeq == 0 {
				t.Fatalf("sequence numbers read %d write %d", st.ReadSeq, st.WriteSeq)
			}
			conn, err := New(raw, st)
			if err != nil {
				t.Fatal(err)
			}
			tlstest.Successor(t) <- conn
			for i := range 3 {
				body, again := get(t, c, fmt.Sprintf("%s/after%d", url, i))
				if body != fmt.Sprintf("successor /after%d", i) || again != local {
					t.Fatalf("after the handover: body %q on %s, want the successor's on %s", body, again, local)
				}
			}
			if got := post(t, c, url+"/post", body, -1); got != "successor /post" {
				t.Fatalf("POST after the handover: %q", got)
			}
			if n := s.Handshakes.Load(); n != 1 {
				t.Fatalf("%d handshakes, want 1", n)
			}
		})
	}
}

// TestNotProvenTLS12: a TLS 1.2 connection is never proven.
func TestNotProvenTLS12(t *testing.T) {
	netnstest.CheckLeaks(t)
	s := startTLSServer(t, "first")
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.Cert.Pool, MaxVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	get(t, &http.Client{Transport: tr}, "https://"+s.Addr+"/")
	r := s.Rec(t, 0)
	err := prove(r)
	t.Logf("TLS 1.2: %v", err)
	if !errors.Is(err, ErrNotProven) {
		t.Fatalf("TLS 1.2: %v, want ErrNotProven", err)
	}
}
