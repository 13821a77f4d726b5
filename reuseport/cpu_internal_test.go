package reuseport

import (
	"slices"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []int
	}{{"0", []int{0}}, {"0-1", []int{0, 1}}, {"0-2,5,7-8", []int{0, 1, 2, 5, 7, 8}}} {
		if got, err := parseCPUList(tt.in); err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "-1", "0,,1"} {
		if got, err := parseCPUList(bad); err == nil {
			t.Errorf("parseCPUList(%q) = %v, want an error", bad, got)
		}
	}
}

func TestAtLeast(t *testing.T) {
	for _, tt := range []struct {
		rel  string
		want bool
	}{{"6.1.0", true}, {"6.18.44-fc-v1147", true}, {"7.0", true}, {"6.0.19-amd64", false}, {"5.15.0-91-generic", false}, {"4.19", false}, {"x", false}} {
		if got := atLeast(tt.rel, 6, 1); got != tt.want {
			t.Errorf("atLeast(%q, 6, 1) = %v, want %v", tt.rel, got, tt.want)
		}
	}
}
