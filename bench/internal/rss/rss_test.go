package rss

import "testing"

func TestParse(t *testing.T) {
	got, err := parse([]byte("Name:\tx\nVmPeak:\t  9 kB\nVmRSS:\t    7424 kB\nVmData:\t1 kB\n"))
	if err != nil || got != 7424 {
		t.Errorf("parse = %d, %v; want 7424", got, err)
	}
	if _, err := parse([]byte("Name:\tx\n")); err == nil {
		t.Error("no VmRSS: no error")
	}
	if n, err := Self(); err != nil || n <= 0 {
		t.Errorf("Self = %d, %v", n, err)
	}
}
