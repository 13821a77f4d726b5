package systemd

import (
	"errors"
	"reflect"
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
