package micro

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// serverCert is a self-signed certificate for 127.0.0.1 with key, and a pool
// that trusts it.
func serverCert(tb testing.TB, key any) (tls.Certificate, *x509.CertPool) {
	tb.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	pub := key.(crypto.Signer).Public()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		tb.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// threadCPU is the CPU time (user + system) of the calling OS thread.
func threadCPU(tb testing.TB) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// handshake runs one TLS 1.3 handshake over a loopback TCP connection of
// l (kernel buffers: crypto/tls sends its tickets before it reads the
// client's Finished, which a synchronous net.Pipe would deadlock) and
// returns the CPU time the server side used (its goroutine locked to a
// thread, measured with RUSAGE_THREAD), and whether it resumed. The client
// reads one byte after it, so that it stores the server's ticket.
func handshake(tb testing.TB, l net.Listener, srv, cli *tls.Config) (time.Duration, bool) {
	type out struct {
		cpu     time.Duration
		resumed bool
		err     error
	}
	done := make(chan out, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		s, err := l.Accept()
		if err != nil {
			done <- out{err: err}
			return
		}
		defer s.Close()
		s.SetDeadline(time.Now().Add(10 * time.Second))
		t0 := threadCPU(tb)
		sc := tls.Server(s, srv)
		err = sc.Handshake()
		cpu := threadCPU(tb) - t0
		if err == nil {
			_, err = sc.Write([]byte{1})
		}
		done <- out{cpu, sc.ConnectionState().DidResume, err}
	}()
	c, err := net.DialTimeout("tcp", l.Addr().String(), 10*time.Second)
	if err == nil {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadFull(tls.Client(c, cli), make([]byte, 1))
		c.Close()
	}
	o := <-done
	if err != nil || o.err != nil {
		tb.Fatalf("handshake: client %v, server %v", err, o.err)
	}
	return o.cpu, o.resumed
}

// BenchmarkServerHandshake measures the server's CPU time per TLS 1.3
// handshake (server-cpu-ns/op), full or resuming a session (a ticket of the
// same keys, as a client that reconnects after a restart with zd-tickets),
// with the certificate kinds a service uses: ECDSA P-256 (the benchmark
// runs' certificate) and RSA 2048. crypto/tls resumes TLS 1.3 with
// psk_dhe_ke only, so a resumed handshake still does an ECDHE exchange; it
// saves the certificate and its signature.
func BenchmarkServerHandshake(b *testing.B) {
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	rs, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for _, k := range []struct {
		name string
		key  any
	}{{"ecdsa-p256", ec}, {"rsa-2048", rs}} {
		cert, pool := serverCert(b, k.key)
		for _, resume := range []bool{false, true} {
			b.Run(k.name+map[bool]string{false: "/full", true: "/resumed"}[resume], func(b *testing.B) {
				srv := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
				cli := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}
				if resume {
					cli.ClientSessionCache = tls.NewLRUClientSessionCache(1)
					handshake(b, l, srv, cli) // the ticket
				}
				var total time.Duration
				for b.Loop() {
					cpu, resumed := handshake(b, l, srv, cli)
					if resumed != resume {
						b.Fatalf("resumed %v, want %v", resumed, resume)
					}
					total += cpu
				}
				b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "server-cpu-ns/op")
			})
		}
	}
}
