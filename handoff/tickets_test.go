package handoff

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/ticket"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// askTickets is a successor that asks for ticket keys (and not the handoff
// socket): it acks every fd batch and returns "got tickets <fds>" once the
// keys arrive, or what it got instead ("got error <code>", "got eof");
// every fd it receives is closed.
func askTickets(c *conn) (string, error) {
	if err := c.send(&frame{Type: typeHello, Version: baseVersion, Role: roleSuccessor, PID: os.Getpid(), Tickets: true}, nil); err != nil {
		var re *RemoteError
		if err := c.answeredFirst(err); errors.As(err, &re) {
			return "got error " + re.Code, nil
		}
		return "", err
	}
	for range 16 {
		f, fds, err := c.recv(BatchFDs)
		closeFDs(fds)
		switch {
		case errors.Is(err, io.EOF):
			return "got eof", nil
		case err != nil:
			return "", err
		case f.Type == typeError:
			return "got error " + f.Code, nil
		case f.Type == typeTickets:
			return fmt.Sprintf("got tickets %d", len(fds)), nil
		case f.Type == typeFDs:
			if err := c.send(&frame{Type: typeAck, Received: f.First + f.Count}, nil); err != nil {
				return "", err
			}
		}
	}
	return "", errors.New("no tickets in 16 frames")
}

// tlsPair is a TLS server config installed with keys (none if nil) and a
// client with a session cache.
func tlsServer(t *testing.T, cert *netnstest.Cert, keys *ticket.Keys) *tls.Config {
	t.Helper()
	sc := &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
	if keys != nil {
		if err := keys.Install(sc); err != nil {
			t.Fatal(err)
		}
	}
	return sc
}

// The ticket keys of a predecessor with Config.TicketKeys reach a successor
// with Config.TicketKeys: a ticket the predecessor's TLS server issued
// resumes at the successor's. The controls: a successor without keys of the
// predecessor's (one whose predecessor has none) does not resume it, and
// the handoff works with keys on one side only.
func TestTicketKeysHandedOver(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		ctx := context.Background()
		cert := netnstest.NewCert(t)
		for _, tc := range []struct {
			name         string
			pred, succ   bool // which side has TicketKeys
			wantResumed  bool
			wantSuccKeys bool // the successor's own keys still resume its own ticket
		}{
			{"both", true, true, true, false},
			{"predecessor only", true, false, false, false},
			{"successor only", false, true, false, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				path := handoffPath(t)
				before := netnstest.FDCount(t)
				pk, sk := newKeys(t), newKeys(t)
				core, logs := observer.New(zap.DebugLevel)
				cfg := Config{Path: path, Logger: zap.New(core)}
				if tc.pred {
					cfg.TicketKeys = pk
				}
				old, err := New(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer old.Close()
				oln, err := old.Listen(ctx, "l0", "tcp4", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				if err := old.Ready(); err != nil {
					t.Fatal(err)
				}
				cc := cert.Client()
				cc.ClientSessionCache = tls.NewLRUClientSessionCache(4)
				netnstest.Resumed(t, tlsServer(t, cert, pk), cc) // a ticket under the predecessor's keys
				own := cert.Client()
				own.ClientSessionCache = tls.NewLRUClientSessionCache(4)
				netnstest.Resumed(t, tlsServer(t, cert, sk), own) // one under the successor's own

				scfg := Config{Path: path, Logger: zap.New(core)}
				if tc.succ {
					scfg.TicketKeys = sk
				}
				u, err := New(ctx, scfg)
				if err != nil {
					t.Fatal(err)
				}
				ln, err := u.Listen(ctx, "l0", "tcp4", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				if err := u.Ready(); err != nil {
					t.Fatal(err)
				}
				if got := netnstest.Resumed(t, tlsServer(t, cert, sk), cc); got != tc.wantResumed {
					t.Errorf("predecessor's ticket resumed at the successor: %v, want %v", got, tc.wantResumed)
				}
				if tc.succ {
					if got := netnstest.Resumed(t, tlsServer(t, cert, sk), own); got != tc.wantSuccKeys {
						t.Errorf("successor's own ticket resumed: %v, want %v", got, tc.wantSuccKeys)
					}
				}
				ln.Close()
				u.Close()
				oln.Close()
				old.Close()
				settleFDs(t, before)
				checkNoKeyLogged(t, logs, pk, sk)
			})
		}
	})
}

// A predecessor of the release before ticket keys refuses the hello's
// "tickets" key as an unknown key; the successor says hello again without
// it and inherits (its keys stay its own).
func TestTicketsOldPredecessor(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		ctx := context.Background()
		l := listenTCP(t)
		path := handoffPath(t)
		before := netnstest.FDCount(t)
		old := serveOldRelease(t, path, l, "tickets", func(hello *frame) bool { return hello.Tickets })
		keys := newKeys(t)
		u, err := New(ctx, Config{Path: path, Timeout: 5 * time.Second, TicketKeys: keys})
		if err != nil {
			t.Fatalf("New against a predecessor without ticket keys: %v", err)
		}
		ln, err := u.Listen(ctx, "http", "tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		u.Close()
		<-old.done
		var asked []bool
		for _, hello := range old.hellos {
			asked = append(asked, hello.Tickets)
		}
		if fmt.Sprint(asked) != "[true false]" {
			t.Errorf("hellos asked for tickets: %v, want [true false]", asked)
		}
		settleFDs(t, before)
	})
}

// A successor that does not ask for tickets (an older release, or one
// without TicketKeys) gets an offer without them and no tickets frame; one
// that asks gets them after the fd batches, as one sealed memfd. An offer
// of tickets to a successor that did not ask is a protocol error.
func TestTicketsOnlyWhenAsked(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		path := handoffPath(t)
		keys := newKeys(t)
		u := mustReady(t, Config{Path: path, TicketKeys: keys}, 1)
		defer u.Close()
		c := fakeSuccessorOffer(t, path, true)
		if c.offer.Tickets {
			t.Error("offer to a successor that did not ask carries tickets")
		}
		c.Close()
		for range 250 { // until the predecessor has seen the last one go
			nc, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			cc, _ := newConn(nc.(*net.UnixConn), 5*time.Second)
			got, err := askTickets(cc)
			cc.Close()
			if err != nil {
				t.Fatal(err)
			}
			if got == "got error "+codeInProgress {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			if got != "got tickets 1" {
				t.Fatalf("a successor that asked: %s, want got tickets 1", got)
			}
			break
		}
	})
}

// An offer of tickets to a successor that did not ask for them is a
// protocol error: the successor fails and receives nothing.
func TestTicketsUnasked(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		ctx := context.Background()
		l := listenTCP(t)
		path := handoffPath(t)
		before := netnstest.FDCount(t)
		done := servePredecessor(t, path, 1, func(c *conn, hello *frame) bool {
			offer := legacyOffer(l)
			offer.Tickets = true
			offerOne(t, c, l, offer) // the successor stops at the offer
			return false
		})
		u, err := New(ctx, Config{Path: path, Timeout: 5 * time.Second})
		if err == nil {
			u.Close()
		}
		if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "did not ask for") {
			t.Fatalf("New offered tickets it did not ask for: %v, want ErrProtocol", err)
		}
		<-done
		settleFDs(t, before)
	})
}

// A successor that fails the credential check (another UID) gets no keys:
// it is refused before the offer. The control, the same successor as our
// UID, gets them.
func TestTicketsNotToRefusedPeer(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		exe := netnstest.ExecutableCopy(t)
		path := fmt.Sprintf("@zerodrop-test-%d-tickets", os.Getpid()) // nobody may connect to it
		keys := newKeys(t)
		u := mustReady(t, Config{Path: path, TicketKeys: keys}, 1)
		defer u.Close()
		run := func(cred *syscall.Credential) string {
			p := netnstest.StartHelper(t, "rawpeer", netnstest.HelperOptions{Path: exe, Credential: cred,
				Env: []string{envPath + "=" + path, envRawRole + "=" + roleSuccessor, envRaw + "=tickets"}})
			a := &appProc{Proc: p, lines: lines(p.Stdout)}
			got := strings.Join(a.expect(t, "got"), " ")
			if code := waitExit(t, p); code != 0 {
				t.Fatalf("raw successor exited %d", code)
			}
			return got
		}
		if got := run(&syscall.Credential{Uid: nobody, Gid: nobody}); got != "got error "+codePermission {
			t.Fatalf("successor as nobody: %q, want got error %s", got, codePermission)
		}
		var got string
		for range 250 { // the refused one may still hold the slot
			if got = run(nil); got != "got error "+codeInProgress {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got != "got tickets 1" {
			t.Fatalf("successor as our uid (the control): %q, want got tickets 1", got)
		}
	})
}

// newKeys is a fresh set of ticket keys, closed when the test ends.
func newKeys(t *testing.T) *ticket.Keys {
	t.Helper()
	k, err := ticket.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// checkNoKeyLogged fails t if any log entry (message or field, as JSON)
// holds any 8 consecutive bytes of a key of keys, raw, hex or base64.
func checkNoKeyLogged(t *testing.T, logs *observer.ObservedLogs, keys ...*ticket.Keys) {
	t.Helper()
	var secrets []string
	for _, k := range keys {
		f, err := k.Export()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		// The format: a 16-byte header, then per key 8 bytes of time and 32
		// of key.
		for off := 16 + 8; off+32 <= len(b); off += 40 {
			key := b[off : off+8]
			secrets = append(secrets, string(key), hex.EncodeToString(key), base64.StdEncoding.EncodeToString(key)[:8])
		}
	}
	if len(logs.All()) == 0 {
		t.Fatal("nothing logged: the check would prove nothing")
	}
	for _, e := range logs.All() {
		line, err := json.Marshal(e.ContextMap())
		if err != nil {
			t.Fatal(err)
		}
		text := e.Message + string(line)
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Fatalf("a key's bytes logged: %s", text)
			}
		}
	}
}
