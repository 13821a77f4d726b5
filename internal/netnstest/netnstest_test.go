package netnstest

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
)

func TestMain(m *testing.M) {
	RegisterHelper("echo-netns", func() {
		b, _ := os.Readlink("/proc/self/ns/net")
		os.Stdout.WriteString(b + "\n")
	})
	HelperMain()
	os.Exit(m.Run())
}

func TestRunFreshNamespace(t *testing.T) {
	for _, v := range []int{0, 1} {
		t.Run(map[int]string{0: "migrate=0", 1: "migrate=1"}[v], func(t *testing.T) {
			Run(t, Options{MigrateReq: v}, func(t *testing.T) {
				got, err := linux.ReadSysctl(linux.MigrateReq)
				if err != nil {
					t.Fatal(err)
				}
				if want := map[int]string{0: "0", 1: "1"}[v]; got != want {
					t.Fatalf("tcp_migrate_req = %s, want %s", got, want)
				}
				// A fresh namespace has lo and nothing listening.
				ifs, err := net.Interfaces()
				if err != nil {
					t.Fatal(err)
				}
				if len(ifs) != 1 || ifs[0].Name != "lo" || ifs[0].Flags&net.FlagUp == 0 {
					t.Fatalf("interfaces = %+v, want only lo, up", ifs)
				}
				// Helpers live in the same namespace.
				self, _ := os.Readlink("/proc/self/ns/net")
				p := StartHelper(t, "echo-netns", HelperOptions{})
				buf := make([]byte, 64)
				n, _ := p.Stdout.Read(buf)
				if got := strings.TrimSpace(string(buf[:n])); got != self {
					t.Fatalf("helper netns %q, test netns %q", got, self)
				}
			})
		})
	}
}

// The experiment behind everything: with no listener accepting, clients queue;
// when the lone listener closes, each of them is reset and Tcp.OutRsts counts it.
func TestQueueAndClassify(t *testing.T) {
	Run(t, Options{MigrateReq: 0}, func(t *testing.T) {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c := Snapshot(t)
		cs := Queue(t, l.Addr().String(), 5, ClientOptions{})
		l.Close()
		tally := cs.Await(3 * time.Second)
		if tally[Reset] != 5 {
			t.Fatalf("tally %v, want 5 reset", tally)
		}
		if d := c.Delta(t, "Tcp.OutRsts"); d["Tcp.OutRsts"] != 5 {
			t.Fatalf("OutRsts delta %d, want 5", d["Tcp.OutRsts"])
		}
		cs = Queue(t, l.Addr().String(), 2, ClientOptions{})
		if n := cs.Await(time.Second); n[Refused] != 2 {
			t.Fatalf("after close: %v, want 2 refused", n)
		}
	})
}

func TestRunPattern(t *testing.T) {
	if got, want := runPattern("TestA/migrate=1"), `^TestA$/^migrate=1$`; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
}

func TestParseH2load(t *testing.T) {
	out := []byte("finished in 2.00s, 9000.00 req/s, 1.2MB/s\nrequests: 18050 total, 18178 started, 18050 done, 18038 succeeded, 12 failed, 12 errored, 0 timeout\nstatus codes: 18038 2xx\n")
	got, err := ParseH2load(out)
	if want := (H2load{Started: 18178, Done: 18050, Succeeded: 18038, Failed: 12, Errored: 12}); err != nil || got != want {
		t.Errorf("ParseH2load = %+v, %v; want %+v", got, err, want)
	}
	if _, err := ParseH2load([]byte("no requests here")); err == nil {
		t.Error("ParseH2load of output without a requests line: no error")
	}
}
