package systemd

import (
	"errors"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestParseEnv(t *testing.T) {
	const pid = 4242
	cases := []struct {
		name  string
		env   map[string]string
		n     int
		names []string
		err   error  // sentinel
		bad   string // EnvError.Var
	}{
		{"not activated", map[string]string{}, 0, nil, nil, ""},
		{"zero fds", map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "0"}, 0, nil, nil, ""},
		{"two fds, no names", map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "2"}, 2, nil, nil, ""},
		{"names", map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "http:admin"}, 2, []string{"http", "admin"}, nil, ""},
		{"other pid", map[string]string{"LISTEN_PID": "1", "LISTEN_FDS": "1"}, 0, nil, ErrListenPID, "LISTEN_PID"},
		{"pid not a number", map[string]string{"LISTEN_PID": "self", "LISTEN_FDS": "1"}, 0, nil, ErrListenPID, "LISTEN_PID"},
		{"pid unset", map[string]string{"LISTEN_FDS": "1"}, 0, nil, ErrListenPID, "LISTEN_PID"},
		{"fds unset", map[string]string{"LISTEN_PID": "4242"}, 0, nil, ErrListenFDs, "LISTEN_FDS"},
		{"fds not a number", map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "two"}, 0, nil, ErrListenFDs, "LISTEN_FDS"},
		{"fds negative", map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "-1"}, 0, nil, ErrListenFDs, "LISTEN_FDS"},
		{"fds huge", map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "100000"}, 0, nil, ErrListenFDs, "LISTEN_FDS"},
		{"too few names", map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "http"}, 2, nil, ErrListenFDNames, "LISTEN_FDNAMES"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, names, err := parseEnv(func(k string) string { return c.env[k] }, pid)
			if n != c.n || !reflect.DeepEqual(names, c.names) {
				t.Fatalf("got %d %q, want %d %q", n, names, c.n, c.names)
			}
			if c.err == nil {
				if err != nil {
					t.Fatalf("error %v", err)
				}
				return
			}
			var ee *EnvError
			if !errors.Is(err, c.err) || !errors.As(err, &ee) || ee.Var != c.bad || ee.Value != c.env[c.bad] {
				t.Fatalf("error %#v, want an *EnvError for %s matching %v", err, c.bad, c.err)
			}
			for _, other := range []error{ErrListenPID, ErrListenFDs, ErrListenFDNames} {
				if other != c.err && errors.Is(err, other) {
					t.Fatalf("error %v also matches %v", err, other)
				}
			}
		})
	}
}

func TestCheckFDName(t *testing.T) {
	for name, ok := range map[string]bool{"http": true, "a-b_c.d": true, "": false, "a:b": false, "a\nb": false, "é": false, string(make([]byte, 256)): false} {
		if err := checkFDName(name); (err == nil) != ok {
			t.Errorf("checkFDName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

// FuzzParseEnv: whatever LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES hold,
// parsing never panics, takes fds only when LISTEN_PID names us, counts them
// within 0..maxFDs with one name each (or none), and otherwise returns an
// *EnvError naming the variable at fault and matching its sentinel alone.
// Activation then offers only fds in 3..3+n-1: the files come from
// go-systemd's activation.Files, here a stand-in that returns files of the
// test's own (opened on /dev/null, not at fds 3..), which activate refuses.
func FuzzParseEnv(f *testing.F) {
	const pid = 4242
	for _, s := range [][3]string{
		{"", "", ""}, {"4242", "0", ""}, {"4242", "2", "http:admin"}, {"4242", "1", ""},
		{"1", "1", ""}, {"+4242", "1", ""}, {"4242", "+1", "a"}, {"4242", "65537", ""},
		{"4242", "2", "http"}, {"4242", "3", "a::b"}, {"4242", "-0", "x"}, {"04242", "1", ":"},
		{"4242", " 1", ""}, {"", "1", ""}, {"4242", "", "http"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	sentinel := map[string]error{EnvListenPID: ErrListenPID, EnvListenFDs: ErrListenFDs, EnvListenFDNames: ErrListenFDNames}
	f.Fuzz(func(t *testing.T, pidStr, fdsStr, namesStr string) {
		env := map[string]string{EnvListenPID: pidStr, EnvListenFDs: fdsStr, EnvListenFDNames: namesStr}
		getenv := func(k string) string { return env[k] }
		n, names, err := parseEnv(getenv, pid)
		if n < 0 || n > maxFDs {
			t.Fatalf("n = %d, outside 0..%d", n, maxFDs)
		}
		if n > 0 {
			if got, perr := strconv.Atoi(pidStr); perr != nil || got != pid {
				t.Fatalf("%d fds taken with LISTEN_PID=%q, not ours", n, pidStr)
			}
		}
		if names != nil && (len(names) != n || strings.Join(names, ":") != namesStr) {
			t.Fatalf("names %q for %d fds from %q", names, n, namesStr)
		}
		if err != nil {
			var ee *EnvError
			if !errors.As(err, &ee) || ee.Value != env[ee.Var] || !errors.Is(err, sentinel[ee.Var]) {
				t.Fatalf("error %#v is not an *EnvError naming its variable and value", err)
			}
			for v, s := range sentinel {
				if v != ee.Var && errors.Is(err, s) {
					t.Fatalf("error %v matches %v too", err, s)
				}
			}
			if names != nil {
				t.Fatalf("names %q returned with error %v", names, err)
			}
		} else if namesStr != "" && n > 0 && names == nil {
			t.Fatalf("LISTEN_FDNAMES=%q dropped without an error", namesStr)
		}
		if n == 0 || n > 16 {
			return // activation checks real fds: keep the cost bounded
		}
		a, _ := activate(getenv, pid, func(bool) []*os.File { return devNull(t, n) })
		if a == nil {
			return
		}
		for _, p := range a.fds {
			if p.fd < firstFD || p.fd >= firstFD+n {
				t.Fatalf("fd %d offered for LISTEN_FDS=%d", p.fd, n)
			}
		}
	})
}

// devNull opens /dev/null n times; a cleanup of t closes the files.
func devNull(t *testing.T, n int) []*os.File {
	t.Helper()
	fs := make([]*os.File, n)
	for i := range fs {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		fs[i] = f
	}
	return fs
}
