package netnstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Cert is an ephemeral self-signed certificate for 127.0.0.1 and localhost,
// made for one test: its key exists only in memory and in the test's temp
// directory.
type Cert struct {
	TLS      tls.Certificate
	Pool     *x509.CertPool // trusts only this certificate
	CertFile string         // PEM files (NewCert: under t.TempDir()), for ServeTLS
	KeyFile  string
}

// NewCert makes a Cert (ECDSA P-256, valid for an hour).
func NewCert(t testing.TB) *Cert {
	t.Helper()
	c, err := WriteCert(t.TempDir(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// WriteCert makes a Cert (ECDSA P-256, valid for the given time) whose PEM
// files are cert.pem and key.pem in dir, for a program that is not a test
// (the restart benchmark's TLS runs).
func WriteCert(dir string, valid time.Duration) (*Cert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "zerodrop test"},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(valid),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
	c := &Cert{Pool: x509.NewCertPool()}
	if c.TLS, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c.Pool.AddCert(leaf)
	c.CertFile, c.KeyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(c.CertFile, certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(c.KeyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}
	return c, nil
}

// Client is a client config that trusts only c, offering protos by ALPN.
func (c *Cert) Client(protos ...string) *tls.Config {
	return &tls.Config{RootCAs: c.Pool, ServerName: "127.0.0.1", NextProtos: protos}
}

// Resumed runs one TLS handshake between a client of cc and a server of sc
// over a pipe, then has the server send a byte for the client to read (a
// TLS 1.3 ticket arrives after the handshake: the client reads and stores
// it), and returns whether the server resumed a session.
func Resumed(tb testing.TB, sc, cc *tls.Config) bool {
	tb.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	srv := tls.Server(a, sc)
	done := make(chan error, 1)
	go func() {
		err := srv.Handshake()
		if err == nil {
			_, err = srv.Write([]byte{1})
		}
		done <- err
	}()
	cl := tls.Client(b, cc)
	if err := cl.Handshake(); err != nil {
		tb.Fatal(err)
	}
	if _, err := io.ReadFull(cl, make([]byte, 1)); err != nil {
		tb.Fatal(err)
	}
	if err := <-done; err != nil {
		tb.Fatal(err)
	}
	return srv.ConnectionState().DidResume
}
