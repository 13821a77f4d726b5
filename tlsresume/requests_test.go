package tlsresume

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// frame feeds stream to a fresh requests in pieces of at most step bytes,
// and says where it stands: "start", "mid", or "lost".
func frame(stream []byte, step int) string {
	var q requests
	for len(stream) > 0 {
		n := min(step, len(stream))
		if err := q.feed(stream[:n]); err != nil {
			if !errors.Is(err, errFraming) {
				panic(err)
			}
			return "lost"
		}
		stream = stream[n:]
	}
	if q.atStart() {
		return "start"
	}
	return "mid"
}

// goFrames reads stream as net/http's server does, request after request,
// each body to its end. ok says every request read without an error or was
// cut short in its body; boundary that the stream ends exactly after a
// request. (A head cut short reads as a malformed one: not ok.)
func goFrames(stream []byte) (ok, boundary bool) {
	br := bufio.NewReader(cutShort{bytes.NewReader(stream)})
	for range 1000 {
		if _, err := br.Peek(1); errors.Is(err, errCutShort) {
			return true, true
		}
		req, err := http.ReadRequest(br)
		if err == nil {
			_, err = io.Copy(io.Discard, req.Body)
		}
		if errors.Is(err, errCutShort) {
			return true, false
		}
		if err != nil {
			return false, false
		}
	}
	return false, false
}

// errCutShort is what cutShort returns at the end of its data.
var errCutShort = errors.New("the stream goes on")

// cutShort reads r, then errCutShort: the end of what arrived so far.
type cutShort struct{ r io.Reader }

func (c cutShort) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err == io.EOF {
		err = errCutShort
	}
	return n, err
}

// TestRequestFraming: the framing of requests as clients send them, fed in
// every piece size from one byte up, ends where net/http's does.
func TestRequestFraming(t *testing.T) {
	const get = "GET / HTTP/1.1\r\nHost: a\r\n\r\n"
	chunked := "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"5\r\nhello\r\n1a;ext=1\r\n" + strings.Repeat("z", 26) + "\r\n0\r\nTrailer: x\r\n\r\n"
	cases := []struct {
		name, stream, want string
	}{
		{"nothing", "", "start"},
		{"get", get, "start"},
		{"get, lf only", "GET / HTTP/1.1\nHost: a\n\n", "start"},
		{"head in part", get[:20], "mid"},
		{"pipelined", get + get + get, "start"},
		{"next request begun", get + "GE", "mid"},
		{"content-length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello world", "start"},
		{"content-length, case and space", "POST / HTTP/1.1\r\nHost: a\r\ncontent-LENGTH:\t3 \r\n\r\nabc" + get, "start"},
		{"body in part", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello", "mid"},
		{"body ends in crlf crlf", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 8\r\n\r\nab\r\n\r\ncd", "start"},
		{"crlf crlf inside a body", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 8\r\n\r\nab\r\n\r\n", "mid"},
		{"chunked", chunked, "start"},
		{"chunked then get", chunked + get, "start"},
		{"chunked in part", chunked[:len(chunked)-2], "mid"},
		{"long cookie", "GET / HTTP/1.1\r\nHost: a\r\nCookie: " + strings.Repeat("c", 5000) + "\r\n\r\n", "start"},
		{"empty line before", "\r\n" + get, "lost"},
		{"two lengths", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\na", "lost"},
		{"length and chunked", "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", "lost"},
		{"gzip, chunked", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", "lost"},
		{"signed length", "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\na", "lost"},
		{"folded", "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", "lost"},
		{"0x chunk", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0x1\r\n", "lost"},
		{"chunk longer than its size", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n", "lost"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for step := 1; step <= len(c.stream)+1; step++ {
				if got := frame([]byte(c.stream), step); got != c.want {
					t.Fatalf("in pieces of %d: %s, want %s", step, got, c.want)
				}
			}
			ok, boundary := goFrames([]byte(c.stream))
			if c.want == "start" && !(ok && boundary) || c.want == "mid" && ok && boundary {
				t.Fatalf("net/http reads it ok=%v ending at a request's end=%v; framing says %s", ok, boundary, c.want)
			}
		})
	}
}

// FuzzRequestFraming: wherever the framing says the stream ends where a
// request ends, net/http, reading the same stream without an error, ends
// there too (else a handover would cut a request); and where net/http
// ends at a request's end, the framing is not lost in the middle of one.
// Whole and in pieces, the framing says the same.
func FuzzRequestFraming(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), 3)
	f.Add([]byte("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: a\r\n\r\n"), 7)
	f.Add([]byte("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x\r\nabc\r\n0\r\nT: 1\r\n\r\n"), 1)
	f.Add([]byte("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\n\r\n\r\n"), 2)
	f.Fuzz(func(t *testing.T, stream []byte, step int) {
		if step < 1 || step > 4096 {
			step = 1 + len(stream)
		}
		whole, pieces := frame(stream, len(stream)+1), frame(stream, step)
		if whole != pieces {
			t.Fatalf("whole: %s, in pieces of %d: %s", whole, step, pieces)
		}
		ok, boundary := goFrames(stream)
		if !ok {
			return // net/http answers an error and closes: never idle again
		}
		switch {
		case whole == "start" && !boundary:
			t.Fatalf("framing at a request's end, net/http in the middle of one: %q", stream)
		case whole == "mid" && boundary:
			t.Fatalf("framing in the middle of a request, net/http at its end: %q", stream)
		}
	})
}
