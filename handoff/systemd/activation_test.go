package systemd

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/ticket"
	"golang.org/x/sys/unix"
)

// runReport runs the report helper with files as fds 3.. and env; through the
// listen-pid-exec wrapper (LISTEN_PID = its own pid) when env has LISTEN_FDS
// and no LISTEN_PID.
func runReport(t *testing.T, files []*os.File, env ...string) report {
	t.Helper()
	name := "report"
	if slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, EnvListenFDs+"=") }) &&
		!slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, EnvListenPID+"=") }) {
		name = "listen-pid-exec"
	}
	p := netnstest.StartHelper(t, name, netnstest.HelperOptions{ExtraFiles: files, Env: append(env, envNext+"=report")})
	var r report
	if err := json.Unmarshal([]byte(readerOf(p).next(t)), &r); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Wait(ctx); err != nil {
		t.Fatalf("report helper: %v", err)
	}
	return r
}

// listenFile returns a plain TCP listener on loopback and a dup of its fd.
func listenFile(t *testing.T) (string, *os.File) {
	t.Helper()
	l, err := reuseport.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := l.File()
	l.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return l.Addr().String(), f
}

func TestActivatedBadEnvironment(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		addr, lf := listenFile(t)
		reg, err := os.Create(filepath.Join(t.TempDir(), "regular"))
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Close()
		cases := []struct {
			name  string
			files []*os.File
			env   []string
			want  report
		}{
			{"LISTEN_PID of another process", []*os.File{lf}, []string{"LISTEN_PID=1", "LISTEN_FDS=1", "LISTEN_FDNAMES=http"},
				report{Is: []string{"ErrListenPID"}, Types: []string{"EnvError LISTEN_PID"}, CloExec: []bool{false, false, false}}},
			{"LISTEN_FDS larger than the fds present", []*os.File{lf}, []string{"LISTEN_FDS=3"},
				report{Is: []string{"ErrFDMissing"}, Types: []string{"FDError activate fd=4 name=", "FDError activate fd=5 name="}, CloExec: []bool{true, false, false}}},
			{"a regular file", []*os.File{reg}, []string{"LISTEN_FDS=1", "LISTEN_FDNAMES=http"},
				report{Is: []string{"ErrNotSocket"}, Types: []string{"FDError activate fd=3 name=http"}, CloExec: []bool{true, false, false}}},
			{"LISTEN_FDNAMES with two names for one fd", []*os.File{lf}, []string{"LISTEN_FDS=1", "LISTEN_FDNAMES=http:admin"},
				report{Is: []string{"ErrListenFDNames"}, Types: []string{"EnvError LISTEN_FDNAMES"}, CloExec: []bool{true, false, false}}},
			{"a name not found", []*os.File{lf}, []string{"LISTEN_FDS=1", "LISTEN_FDNAMES=http", envTake + "=metrics,tcp,"},
				report{CloExec: []bool{true, false, false}, Available: []string{"http=tcp4:" + addr},
					TakeIs: []string{"ErrNotFound"}, TakeTypes: []string{"NotFoundError metrics [http=tcp4:" + addr + "]"}}},
			{"a name of another kind", []*os.File{lf}, []string{"LISTEN_FDS=1", "LISTEN_FDNAMES=http", envTake + "=http,udp,"},
				report{CloExec: []bool{true, false, false}, Available: []string{"http=tcp4:" + addr},
					TakeIs: []string{"ErrKind"}, TakeTypes: []string{"FDError take fd=3 name=http"}}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				got := runReport(t, c.files, c.env...)
				if got.Err == "" && c.want.Is != nil {
					t.Fatalf("Activated returned no error, want %v", c.want.Is)
				}
				t.Logf("error: %s%s", got.Err, got.TakeErr)
				got.Err, got.TakeErr = "", ""
				if !reflect.DeepEqual(got, c.want) {
					t.Fatalf("got  %+v\nwant %+v", got, c.want)
				}
			})
		}
	})
}

func TestActivatedTake(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		a1, f1 := listenFile(t)
		a2, f2 := listenFile(t)
		files := []*os.File{f1, f2}
		env := []string{"LISTEN_FDS=2", "LISTEN_FDNAMES=http:admin"}
		avail := []string{"http=tcp4:" + a1, "admin=tcp4:" + a2}
		cases := []struct{ name, take, took string }{
			{"by name", "admin,tcp,", a2},
			{"by name and address", "http,tcp4," + a1, a1},
			{"by address", ",tcp," + a2, a2},
			{"unknown name, by address", "metrics,tcp," + a2, a2},
			{"by name, any network", "admin,,", a2},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				got := runReport(t, files, append(env, envTake+"="+c.take)...)
				want := report{CloExec: []bool{true, true, false}, Available: avail, Took: c.took}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("got  %+v\nwant %+v", got, want)
				}
			})
		}
		t.Run("not activated", func(t *testing.T) {
			got := runReport(t, files, "LISTEN_FDNAMES=", envTake+"=http,tcp,")
			want := report{CloExec: []bool{false, false, false}, TakeIs: []string{"ErrNotFound"}, TakeTypes: []string{"NotFoundError http []"}}
			got.TakeErr = ""
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
		})
	})
}

// ticketMemfd returns a memfd of fresh session-ticket keys (ticket.Keys.Export).
func ticketMemfd(t *testing.T) *os.File {
	t.Helper()
	k, err := ticket.New()
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	f, err := k.Export()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestActivatedTickets: the memfd of session-ticket keys that zerodrop.Serve
// keeps in the fd store comes back at the next start beside the sockets,
// named zerodrop-tickets: Activated accepts it (not a socket, but a sealed
// memfd of ticket.Keys.Export), Tickets hands it out and its keys import,
// and no take by name or address returns it as a socket. Anything else under
// that name is ErrTickets, and the memfd under a socket's name ErrNotSocket.
func TestActivatedTickets(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		addr, lf := listenFile(t)
		keys := ticketMemfd(t)
		reg, err := os.Create(filepath.Join(t.TempDir(), "regular"))
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Close()
		fd, err := unix.MemfdCreate(ticket.FDName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			t.Fatal(err)
		}
		unsealed := os.NewFile(uintptr(fd), "unsealed")
		defer unsealed.Close()
		if _, err := io.Copy(unsealed, io.NewSectionReader(keys, 0, 1<<10)); err != nil {
			t.Fatal(err)
		}
		names := "LISTEN_FDNAMES=http:" + ticket.FDName
		avail := []string{"http=tcp4:" + addr, ticket.FDName + "=memfd"}
		cases := []struct {
			name  string
			files []*os.File
			env   []string
			want  report
		}{
			{"the keys beside a socket", []*os.File{lf, keys}, []string{"LISTEN_FDS=2", names, envTake + "=http,tcp,"},
				report{CloExec: []bool{true, true, false}, Available: avail, Tickets: "keys=1", Took: addr}},
			{"no take by address returns them", []*os.File{keys, lf}, []string{"LISTEN_FDS=2", "LISTEN_FDNAMES=" + ticket.FDName + ":http", envTake + "=,tcp," + addr},
				report{CloExec: []bool{true, true, false}, Available: []string{avail[1], avail[0]}, Tickets: "keys=1", Took: addr}},
			{"a regular file named zerodrop-tickets", []*os.File{lf, reg}, []string{"LISTEN_FDS=2", names},
				report{Is: []string{"ErrTickets"}, Types: []string{"FDError activate fd=4 name=" + ticket.FDName}, CloExec: []bool{true, true, false}}},
			{"an unsealed memfd", []*os.File{lf, unsealed}, []string{"LISTEN_FDS=2", names},
				report{Is: []string{"ErrTickets"}, Types: []string{"FDError activate fd=4 name=" + ticket.FDName}, CloExec: []bool{true, true, false}}},
			{"a socket named zerodrop-tickets", []*os.File{lf}, []string{"LISTEN_FDS=1", "LISTEN_FDNAMES=" + ticket.FDName},
				report{Is: []string{"ErrTickets"}, Types: []string{"FDError activate fd=3 name=" + ticket.FDName}, CloExec: []bool{true, false, false}}},
			{"the keys under another name", []*os.File{lf, keys}, []string{"LISTEN_FDS=2", "LISTEN_FDNAMES=http:keys"},
				report{Is: []string{"ErrNotSocket"}, Types: []string{"FDError activate fd=4 name=keys"}, CloExec: []bool{true, true, false}}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				got := runReport(t, c.files, c.env...)
				if got.Err == "" && c.want.Is != nil {
					t.Fatalf("Activated returned no error, want %v", c.want.Is)
				}
				t.Logf("error: %s%s", got.Err, got.TakeErr)
				got.Err, got.TakeErr = "", ""
				if !reflect.DeepEqual(got, c.want) {
					t.Fatalf("got  %+v\nwant %+v", got, c.want)
				}
			})
		}
	})
}
