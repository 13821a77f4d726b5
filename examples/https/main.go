package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/handoff"
	"golang.org/x/sys/unix"
)

// config is the command line.
type config struct {
	addr, socket, cert, key string
	grace                   time.Duration
	args                    []string // passed on to the successor
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("zerodrop-https-%d", os.Geteuid()))
	c := &config{args: args}
	fs := flag.NewFlagSet("https", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8443", "address to listen on (the first generation)")
	fs.StringVar(&c.socket, "socket", filepath.Join(dir, "handoff.sock"),
		"handoff socket; https.pid (and a generated certificate and key) go next to it, in a directory that must be ours and 0700 (created so if missing)")
	fs.StringVar(&c.cert, "cert", "", "PEM certificate file (default: a self-signed one, made at start)")
	fs.StringVar(&c.key, "key", "", "PEM key file of -cert")
	fs.DurationVar(&c.grace, "grace", 30*time.Second, "bound on the drain")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if (c.cert == "") != (c.key == "") {
		return nil, fmt.Errorf("-cert and -key go together")
	}
	return c, nil
}

func main() {
	c, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	if err := run(context.Background(), c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "https example:", err)
		os.Exit(1)
	}
}

// run serves one generation over TLS with zerodrop.Serve: it inherits or
// creates the listener, starts a successor on SIGHUP, and drains once the
// successor is ready, on SIGTERM or SIGINT, or when ctx ends.
func run(ctx context.Context, c *config, out io.Writer) error {
	dir := filepath.Dir(c.socket)
	if c.cert == "" { // the first generation: its successors load this one
		if err := selfSigned(dir); err != nil {
			return err
		}
		c.cert, c.key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		c.args = append(c.args, "-cert", c.cert, "-key", c.key)
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		return err
	}
	var gen atomic.Uint64
	srv := &http.Server{
		Handler:           newHandler(&gen),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}}, // h2 and http/1.1 by ALPN
		ReadHeaderTimeout: 10 * time.Second,
	}
	rep, err := zerodrop.Serve(ctx, srv, []string{c.addr}, zerodrop.Options{Config: zerodrop.Config{
		Handoff:   handoff.Config{Path: c.socket, PIDFile: filepath.Join(dir, "https.pid")},
		Grace:     c.grace,
		Successor: func() *exec.Cmd { return successor(c) },
		OnListen:  func(g uint64, _ []net.Addr) { gen.Store(g) },
		OnServing: func(g uint64, addrs []net.Addr) {
			fmt.Fprintf(out, "generation %d serving %s pid %d\n", g, addrs[0], os.Getpid())
			if g == 1 {
				fmt.Fprintf(out, "try: curl --http2 --cacert %s https://%s/\n", c.cert, addrs[0])
				fmt.Fprintf(out, "upgrade: kill -HUP $(cat %s)\n", filepath.Join(dir, "https.pid"))
			}
		},
	}})
	if rep != nil && len(rep.Drains) > 0 && rep.Drains[0] != nil {
		fmt.Fprintf(out, "generation %d stopped: %s\n", rep.Generation, rep.Drains[0].Method)
	}
	return err
}

// newHandler answers every request with its generation, pid and protocol
// (HTTP/2.0 or HTTP/1.1); the generation is also the X-Generation header.
func newHandler(gen *atomic.Uint64) http.Handler {
	pid := strconv.Itoa(os.Getpid())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g := strconv.FormatUint(gen.Load(), 10)
		w.Header().Set("X-Generation", g)
		fmt.Fprintf(w, "generation %s pid %s %s\n", g, pid, r.Proto)
	})
}

// successor is the next generation, with our arguments and certificate:
// this binary's path again (so a binary replaced on disk is what runs), or
// if it is gone (go run deletes its build when the first generation exits)
// the binary we run.
func successor(c *config) *exec.Cmd {
	bin, err := os.Executable()
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		bin = "/proc/self/exe"
	}
	cmd := exec.Command(bin, c.args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd
}

// selfSigned writes a new self-signed certificate for 127.0.0.1, ::1 and
// localhost, valid for a week, to cert.pem in dir, and its key to key.pem
// (0600), in a directory that must be ours alone (see privateDir).
func selfSigned(dir string) error {
	dirfd, err := privateDir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "zerodrop https example"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := createIn(dirfd, dir, "key.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return createIn(dirfd, dir, "cert.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}
