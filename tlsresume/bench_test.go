package tlsresume

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/tlstest"
)

// BenchmarkKeepAliveGET is the cost of following a connection's records:
// GETs of a 1 KiB or 64 KiB body on one TLS 1.3 keep-alive connection over
// loopback, with the server's tls.Conn directly on the socket ("direct") or
// over a Recorder ("recorded").
func BenchmarkKeepAliveGET(b *testing.B) {
	cert := netnstest.NewCert(b)
	for _, size := range []int{1 << 10, 64 << 10} {
		body := strings.Repeat("x", size)
		for _, recorded := range []bool{false, true} {
			name := map[bool]string{false: "direct", true: "recorded"}[recorded]
			b.Run(name+"/"+map[int]string{1 << 10: "1KiB", 64 << 10: "64KiB"}[size], func(b *testing.B) {
				var capture Capture
				cfg := &tls.Config{Certificates: []tls.Certificate{cert.TLS}, NextProtos: []string{"http/1.1"}}
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				var ln net.Listener = tls.NewListener(l, cfg)
				if recorded {
					ln = tlstest.NewListener(l, capture.Config(cfg), capture.Wrap)
				}
				srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) })}
				go srv.Serve(ln)
				defer srv.Close()
				tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cert.Pool, MinVersion: tls.VersionTLS13}, MaxIdleConnsPerHost: 1}
				defer tr.CloseIdleConnections()
				c := &http.Client{Transport: tr}
				url := "https://" + l.Addr().String() + "/"
				b.SetBytes(int64(size))
				b.ResetTimer()
				for range b.N {
					resp, err := c.Get(url)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
}
