package zerodrop_test

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/ticket"
	"golang.org/x/sys/unix"
)

// resumeActivatedMain is resumeMain started as systemd starts a service
// whose fd store holds fds: LISTEN_FDS and LISTEN_FDNAMES are set, the fds
// are 3.., and LISTEN_PID, which systemd sets between fork and exec, is set
// here first.
func resumeActivatedMain() {
	if os.Getenv("LISTEN_FDS") != "" {
		os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
	}
	resumeMain()
}

// ticketServer serves HTTPS with keys installed, answering as resumeMain
// does, on a fresh loopback port, until the test ends; it returns its URL.
func ticketServer(t *testing.T, cert *netnstest.Cert, keys *ticket.Keys) string {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
	if err := keys.Install(cfg); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{TLSConfig: cfg, ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Resumed", strconv.FormatBool(r.TLS.DidResume))
		fmt.Fprintf(w, "%d\n", os.Getpid())
	})}
	go srv.ServeTLS(l, "", "")
	t.Cleanup(func() { srv.Close() })
	return "https://" + l.Addr().String() + "/"
}

// expectStore reads the notifications up to the FDSTORE=1 of the ticket
// keys: the message before it must be their FDSTOREREMOVE=1; it returns the
// stored fd.
func expectStore(t *testing.T, sd *netnstest.NotifySocket) *os.File {
	t.Helper()
	prev := ""
	for range 5 {
		msg, fds := sd.Recv(t)
		if msg == "FDSTORE=1\nFDNAME="+ticket.FDName {
			if prev != "FDSTOREREMOVE=1\nFDNAME="+ticket.FDName || len(fds) != 1 {
				t.Fatalf("FDSTORE=1 with %d fds after %q; want 1 fd, after FDSTOREREMOVE=1 of the same name", len(fds), prev)
			}
			return fds[0]
		}
		prev = msg
	}
	t.Fatal("no FDSTORE=1 of the ticket keys in 5 notifications")
	return nil
}

// TestServeTicketsFromActivation plays systemd around Serve's key store:
// a TLS service started with a memfd of keys K named zerodrop-tickets
// among its activated fds (as systemd passes its fd store back) resumes a
// session of a ticket issued under K, and stores its keys at Ready and
// again at the stop (FDSTOREREMOVE=1 then FDSTORE=1 with a sealed memfd,
// ticket.Check) that still hold K. A memfd under that name that Import
// refuses (sealed and of the right size, but not keys) does not stop the
// service: it serves with fresh keys, and resumes nothing.
func TestServeTicketsFromActivation(t *testing.T) {
	for _, good := range []bool{true, false} {
		t.Run(map[bool]string{true: "keys", false: "refused memfd"}[good], func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				cert := netnstest.NewCert(t)
				keys, err := ticket.New()
				if err != nil {
					t.Fatal(err)
				}
				defer keys.Close()
				var passed *os.File
				if good {
					passed, err = keys.Export()
				} else {
					passed, err = junkMemfd()
				}
				if err != nil {
					t.Fatal(err)
				}
				defer passed.Close()
				c := sessionClient(t, cert, 0)
				if _, resumed := resumedGet(t, c, ticketServer(t, cert, keys)); resumed {
					t.Fatal("the first connection resumed")
				}
				sd := netnstest.ListenNotify(t, filepath.Join(t.TempDir(), "notify"))
				env := []string{"ZERODROP_TEST_HELPER=resume-activated", "ZD_ADDR=127.0.0.1:8080", "ZD_CERT=" + cert.CertFile, "ZD_KEY=" + cert.KeyFile,
					"LISTEN_FDS=1", "LISTEN_FDNAMES=" + ticket.FDName, "NOTIFY_SOCKET=" + sd.Addr}
				s := netnstest.StartSubreapedFiles(t, netnstest.ExecutableCopy(t), []*os.File{passed}, env, "-test.run=^$")
				pid := servingPID(t, s.Expect(t, "serving 1 "))
				stored := []*os.File{expectStore(t, sd)} // at Ready
				if got, resumed := resumedGet(t, c, "https://127.0.0.1:8080/"); got != pid || resumed != good {
					t.Errorf("pid %d resumed %v with a ticket of the passed keys; want pid %d, resumed %v", got, resumed, pid, good)
				}
				if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				stored = append(stored, expectStore(t, sd)) // at the stop
				s.StopLast(t, []int{pid}, "report 1 ")
				for i, f := range stored {
					if err := ticket.Check(f); err != nil {
						t.Fatalf("stored fd %d: %v", i, err)
					}
					k, err := ticket.New()
					if err != nil {
						t.Fatal(err)
					}
					defer k.Close()
					if err := k.Import(f); err != nil {
						t.Fatalf("stored fd %d: %v", i, err)
					}
					// A ticket of the service's keys resumes at a server of
					// the stored ones; with the passed keys K, so does one
					// of K (the client's latest ticket is the service's).
					if _, resumed := resumedGet(t, c, ticketServer(t, cert, k)); !resumed {
						t.Errorf("stored fd %d: a ticket of the service does not resume with its keys", i)
					}
				}
			})
		})
	}
}

// junkMemfd is a memfd named zerodrop-tickets, sealed as ticket.Keys.Export
// seals its own and of the size of one key, whose content is not keys.
func junkMemfd() (*os.File, error) {
	fd, err := unix.MemfdCreate(ticket.FDName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "junk")
	if _, err := f.Write([]byte(strings.Repeat("x", 16+40))); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
