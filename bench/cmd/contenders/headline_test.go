package main

import (
	"os"
	"strings"
	"testing"
)

// The headline tables of a small fixture: a table per mode present, in
// headlineModes' order, skipped and failed runs shown as such, the header's
// command and load average carried over, and the closest-peer line computed
// from the rows (testdata/headline.golden.md, read and checked by hand).
func TestHeadlineFixture(t *testing.T) {
	runs, err := readHeadline("testdata/headline")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	writeHeadline(&b, runs)
	want, err := os.ReadFile("testdata/headline.golden.md")
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("headline of testdata/headline:\n%s\nwant testdata/headline.golden.md:\n%s", b.String(), want)
	}
}

// No mode directory: an error naming the directories looked for.
func TestHeadlineEmpty(t *testing.T) {
	if _, err := readHeadline(t.TempDir()); err == nil || !strings.Contains(err.Error(), "new-conn") {
		t.Errorf("readHeadline(empty dir) = %v; want an error naming new-conn", err)
	}
}

// The closest peer, by failed requests then p99 ratio, per concurrency, and
// who leads: zerodrop, the peer, or neither.
func TestClosest(t *testing.T) {
	row := func(name string, c int, failed int64, p99 float64) summary {
		return summary{Contender: name, Concurrency: c, Failed: failed, P99Steady: 10, P99Restart: p99}
	}
	for _, tc := range []struct {
		rows []summary
		want string
	}{
		{[]summary{row("naive", 64, 50, 10), row("haproxy", 64, 3, 11), row("zd-drain", 64, 0, 12)},
			"c=64: haproxy (3 failed, p99 ratio 1.10) against zd-drain (0 failed, p99 ratio 1.20): zerodrop leads by 3 failed requests"},
		{[]summary{row("caddy", 256, 0, 10), row("zd-handoff", 256, 2, 10)},
			"c=256: caddy (0 failed, p99 ratio 1.00) against zd-handoff (2 failed, p99 ratio 1.00): the peer leads by 2 failed requests"},
		{[]summary{{Contender: "haproxy", Concurrency: 64, Failed: 32, H2load: true}, {Contender: "zd-drain", Concurrency: 64, H2load: true}},
			"c=64: haproxy (32 failed) against zd-drain (0 failed): zerodrop leads by 32 failed requests"},
		{[]summary{row("nginx", 64, 0, 10), row("zd-handoff", 64, 0, 13)},
			"equal on failures, the peer leads by 0.30 in p99 ratio"},
		{[]summary{row("nginx", 64, 0, 10), row("zd-handoff", 64, 0, 10)}, "a tie"},
		{[]summary{row("nginx", 64, 0, 10)}, "no zerodrop and peer rows"},
	} {
		if got := closest(tc.rows); !strings.Contains(got, tc.want) {
			t.Errorf("closest(%v) = %q; want it to contain %q", tc.rows, got, tc.want)
		}
	}
}

// What a restart replaces: by name, or by the name a contender extends.
func TestRestartKind(t *testing.T) {
	for name, want := range map[string]string{"nginx-reuseport-4to2": "config reload only",
		"zd-systemd-pid1": "new binary (stop, start)", "reuseport-m1": "new binary (1 of 4 workers)", "other": "-"} {
		if got := restartKind(name); got != want {
			t.Errorf("restartKind(%q) = %q; want %q", name, got, want)
		}
	}
}

// The tables go between the markers, replacing what was there, and the rest
// of the document stays; a document without both markers is an error.
func TestSpliceHeadline(t *testing.T) {
	doc := "# B\n\n" + headlineBegin + " by X -->\n\nold\ntables\n\n" + headlineEnd + "\n\n## Method\n"
	got, err := spliceHeadline(doc, "### new\n\n| a |\n")
	want := "# B\n\n" + headlineBegin + " by X -->\n\n### new\n\n| a |\n\n" + headlineEnd + "\n\n## Method\n"
	if err != nil || got != want {
		t.Errorf("spliceHeadline = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"# B\n", headlineEnd + "\n" + headlineBegin + " -->\n", headlineBegin + " -->\n"} {
		if _, err := spliceHeadline(bad, "x"); err == nil {
			t.Errorf("spliceHeadline(%q): no error", bad)
		}
	}
}
