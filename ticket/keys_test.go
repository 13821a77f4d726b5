package ticket

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"golang.org/x/sys/unix"
)

// server returns a server config with cert and k's keys installed (none if
// k is nil).
func server(t *testing.T, cert *netnstest.Cert, k *Keys) *tls.Config {
	t.Helper()
	sc := &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
	if k != nil {
		if err := k.Install(sc); err != nil {
			t.Fatal(err)
		}
	}
	return sc
}

func client(cert *netnstest.Cert) *tls.Config {
	cc := cert.Client()
	cc.ClientSessionCache = tls.NewLRUClientSessionCache(8)
	return cc
}

// handOn exports k and imports it into a fresh Keys, as a successor does.
func handOn(t *testing.T, k *Keys) *Keys {
	t.Helper()
	f, err := k.Export()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	k2, err := New()
	if err != nil {
		t.Fatal(err)
	}
	k2.now, k2.RotateEvery, k2.Lifetime = k.now, k.RotateEvery, k.Lifetime
	if err := k2.Import(f); err != nil {
		t.Fatal(err)
	}
	return k2
}

// TestResumeAcrossKeys: a ticket of a server with k resumes at a server
// whose keys were imported from k, in TLS 1.3 and 1.2; not at a server with
// keys of its own (the control).
func TestResumeAcrossKeys(t *testing.T) {
	cert := netnstest.NewCert(t)
	for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		k, err := New()
		if err != nil {
			t.Fatal(err)
		}
		cc := client(cert)
		cc.MaxVersion = v
		if netnstest.Resumed(t, server(t, cert, k), cc) {
			t.Fatal("first handshake resumed")
		}
		if !netnstest.Resumed(t, server(t, cert, k), cc) {
			t.Fatalf("version %x: same keys, not resumed", v)
		}
		own, err := New()
		if err != nil {
			t.Fatal(err)
		}
		if netnstest.Resumed(t, server(t, cert, own), cc) {
			t.Fatalf("version %x: resumed at a server with other keys", v)
		}
		// The control took the client's ticket (it got a new, useless
		// one); get one from k again.
		netnstest.Resumed(t, server(t, cert, k), cc)
		k2 := handOn(t, k)
		if !netnstest.Resumed(t, server(t, cert, k2), cc) {
			t.Fatalf("version %x: imported keys, not resumed", v)
		}
		k.Close()
		k2.Close()
		own.Close()
	}
}

// TestRotation: a due key is replaced; the old one still decrypts for
// Lifetime, then it is dropped (and zeroed), and the ticket it encrypted no
// longer resumes.
func TestRotation(t *testing.T) {
	cert := netnstest.NewCert(t)
	now := time.Now()
	k, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	k.now = func() time.Time { return now }
	k.RotateEvery, k.Lifetime = time.Hour, 3*time.Hour
	sc := server(t, cert, k)
	cc, late := client(cert), client(cert)
	netnstest.Resumed(t, sc, cc) // tickets under the first key
	netnstest.Resumed(t, sc, late)
	first := k.keys[0]

	now = now.Add(30 * time.Minute)
	if err := k.Refresh(); err != nil || k.Len() != 1 {
		t.Fatalf("refresh before due: %d keys, %v; want 1", k.Len(), err)
	}
	now = now.Add(31 * time.Minute)
	if err := k.Refresh(); err != nil || k.Len() != 2 || k.keys[1] != first {
		t.Fatalf("refresh when due: %d keys, %v; want 2, the first second", k.Len(), err)
	}
	// A fresh config with the rotated keys, as a successor's: the old
	// ticket still resumes.
	if !netnstest.Resumed(t, server(t, cert, handOn(t, k)), cc) {
		t.Fatal("ticket of the rotated-out key not resumed")
	}
	// A new ticket from sc: the new key encrypts it.
	cc2 := client(cert)
	netnstest.Resumed(t, sc, cc2)

	now = now.Add(3*time.Hour + time.Minute) // the first key stopped 3h01 ago
	if err := k.Refresh(); err != nil {
		t.Fatal(err)
	}
	if k.Len() != 2 || k.keys[1] == first {
		t.Fatalf("%d keys after the lifetime, first still there: %v", k.Len(), k.keys[1] == first)
	}
	if first.b != [32]byte{} {
		t.Fatal("dropped key not zeroed")
	}
	if netnstest.Resumed(t, sc, late) {
		t.Fatal("ticket of a dropped key resumed")
	}
	if !netnstest.Resumed(t, sc, cc2) {
		t.Fatal("ticket of a live rotated-out key not resumed (keys not re-installed?)")
	}
}

// TestMaxKeys: rotations beyond MaxKeys drop the oldest.
func TestMaxKeys(t *testing.T) {
	k, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	for range MaxKeys + 5 {
		if err := k.Rotate(); err != nil {
			t.Fatal(err)
		}
	}
	if k.Len() != MaxKeys {
		t.Fatalf("%d keys, want %d", k.Len(), MaxKeys)
	}
	k2 := handOn(t, k)
	defer k2.Close()
	if k2.Len() != MaxKeys {
		t.Fatalf("imported %d keys, want %d", k2.Len(), MaxKeys)
	}
}

// TestImportAdoptsYoungKey: the successor encrypts with the predecessor's
// key while it is young (no key per restart), and rotates one that is due.
func TestImportAdoptsYoungKey(t *testing.T) {
	k, _ := New()
	defer k.Close()
	k2 := handOn(t, k)
	defer k2.Close()
	if k2.Len() != 1 || k2.keys[0].b != k.keys[0].b {
		t.Fatalf("successor holds %d keys, first the predecessor's: %v", k2.Len(), k2.keys[0].b == k.keys[0].b)
	}
	k.keys[0].created = time.Now().Add(-25 * time.Hour)
	k3 := handOn(t, k)
	defer k3.Close()
	if k3.Len() != 2 || k3.keys[1].b != k.keys[0].b {
		t.Fatalf("due key: successor holds %d keys, want a fresh one and the predecessor's", k3.Len())
	}
}

// TestImportRefuses: only a sealed memfd of Export's format is imported;
// anything else matches ErrInvalid and leaves the keys as they were.
func TestImportRefuses(t *testing.T) {
	k, _ := New()
	defer k.Close()
	before := k.keys[0].b
	good, err := k.Export()
	if err != nil {
		t.Fatal(err)
	}
	content := make([]byte, headerLen+entryLen)
	if _, err := good.ReadAt(content, 0); err != nil {
		t.Fatal(err)
	}
	good.Close()

	named := func(name string, b []byte, seal int) *os.File {
		fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "memfd")
		if _, err := f.Write(b); err != nil {
			t.Fatal(err)
		}
		if seal != 0 {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seal); err != nil {
				t.Fatal(err)
			}
		}
		return f
	}
	memfd := func(b []byte, seal int) *os.File { return named(FDName, b, seal) }
	plain := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(plain, content, 0o600); err != nil {
		t.Fatal(err)
	}
	pf, err := os.Open(plain)
	if err != nil {
		t.Fatal(err)
	}
	future := append([]byte(nil), content...)
	future[headerLen] = 0x7f // created far in the future
	cases := map[string]*os.File{
		"regular file":     pf,
		"unsealed memfd":   memfd(content, 0),
		"writable memfd":   memfd(content, unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL),
		"short":            memfd(content[:headerLen+entryLen-1], seals),
		"bad magic":        memfd(append([]byte("XX"), content[2:]...), seals),
		"count mismatch":   memfd(append(content[:11:11], append([]byte{2}, content[12:]...)...), seals),
		"future key":       memfd(future, seals),
		"sealed but empty": memfd(nil, seals),
		"another name":     named("keys", content, seals),
	}
	for name, f := range cases {
		err := k.Import(f)
		cerr := Check(f)
		f.Close()
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
		// Check reads no key: it refuses the files whose name, seals
		// or size are wrong, not those whose content is.
		wantCheck := name != "bad magic" && name != "count mismatch" && name != "future key"
		if got := errors.Is(cerr, ErrInvalid); got != wantCheck {
			t.Errorf("%s: Check: %v, want ErrInvalid: %v", name, cerr, wantCheck)
		}
	}
	if k.Len() != 1 || k.keys[0].b != before {
		t.Fatal("a refused import changed the keys")
	}
	// The control: the same content, sealed, is imported.
	f := memfd(content, seals)
	defer f.Close()
	if err := Check(f); err != nil {
		t.Fatalf("Check of a well-formed sealed memfd: %v", err)
	}
	if err := k.Import(f); err != nil {
		t.Fatalf("well-formed sealed memfd: %v", err)
	}
}

// TestExportSealed: nobody can write the exported memfd.
func TestExportSealed(t *testing.T) {
	k, _ := New()
	defer k.Close()
	f, err := k.Export()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{0}, 0); !errors.Is(err, unix.EPERM) {
		t.Fatalf("write to the exported memfd: %v, want EPERM", err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_EXEC); !errors.Is(err, unix.EPERM) {
		t.Fatalf("a further seal: %v, want EPERM", err)
	}
}

// TestCloseZeroes: Close zeroes the keys; every method then fails with
// ErrClosed; String never shows a key.
func TestCloseZeroes(t *testing.T) {
	k, _ := New()
	kk := k.keys[0]
	if s := k.String(); strings.Contains(s, string(kk.b[:4])) || s != "ticket.Keys(1 keys)" {
		t.Fatalf("String: %q", s)
	}
	k.Close()
	k.Close()
	if kk.b != [32]byte{} {
		t.Fatal("Close left a key")
	}
	if err := k.Rotate(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Rotate after Close: %v", err)
	}
	if err := k.Install(&tls.Config{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Install after Close: %v", err)
	}
	if _, err := k.Export(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Export after Close: %v", err)
	}
}

// TestCloneFollows: a clone of an installed config (as http.Server.ServeTLS
// makes) uses the keys k holds now, also those imported after the clone.
func TestCloneFollows(t *testing.T) {
	cert := netnstest.NewCert(t)
	pred, _ := New()
	defer pred.Close()
	k, _ := New()
	defer k.Close()
	clone := server(t, cert, k).Clone()
	cc := client(cert)
	netnstest.Resumed(t, server(t, cert, pred), cc)
	if netnstest.Resumed(t, clone, cc) {
		t.Fatal("resumed before the import")
	}
	netnstest.Resumed(t, server(t, cert, pred), cc)
	f, err := pred.Export()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := k.Import(f); err != nil {
		t.Fatal(err)
	}
	if !netnstest.Resumed(t, clone, cc) {
		t.Fatal("a clone made before the import did not resume the predecessor's ticket")
	}
}

// TestInstallHooksSet: a config with session hooks of its own is refused.
func TestInstallHooksSet(t *testing.T) {
	k, _ := New()
	defer k.Close()
	cfg := &tls.Config{UnwrapSession: func([]byte, tls.ConnectionState) (*tls.SessionState, error) { return nil, nil }}
	if err := k.Install(cfg); !errors.Is(err, ErrHooksSet) {
		t.Fatalf("Install: %v, want ErrHooksSet", err)
	}
}

// TestAfterClose: an installed config goes on after Close: handshakes
// succeed, issue tickets, and resume none of k's.
func TestAfterClose(t *testing.T) {
	cert := netnstest.NewCert(t)
	k, _ := New()
	sc := server(t, cert, k)
	cc := client(cert)
	netnstest.Resumed(t, sc, cc)
	k.Close()
	if netnstest.Resumed(t, sc, cc) {
		t.Fatal("resumed a ticket of closed keys")
	}
	if netnstest.Resumed(t, sc, cc) {
		t.Fatal("resumed a ticket issued after Close")
	}
}
