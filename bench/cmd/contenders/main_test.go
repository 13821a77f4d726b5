package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zerodrop/zerodrop/bench/internal/worker"
)

// TestMain lets the test binary serve as a worker and as a run child, as the
// command can: the tests run their workers from the test binary itself
// (workerBin stays "").
func TestMain(m *testing.M) {
	worker.Main()
	runChildMain()
	os.Exit(m.Run())
}

// The worker binary: -worker must name an executable file; without it, this
// binary serves, with a note, when no zdworker is beside it.
func TestFindWorker(t *testing.T) {
	var note strings.Builder
	self, _ := os.Executable()
	lean := filepath.Join(filepath.Dir(self), workerName)
	if _, err := os.Stat(lean); err == nil {
		t.Skipf("%s exists", lean)
	}
	if got, err := findWorker("", &note); err != nil || got != self || !strings.Contains(note.String(), "no zdworker, zdworker-steer, zdworker-tableflip, zdworker-quic beside") {
		t.Errorf("findWorker(\"\") = %q, %v, note %q; want %q and a note", got, err, note.String(), self)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "w")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := findWorker(bin, io.Discard); err != nil || got != bin {
		t.Errorf("findWorker(%q) = %q, %v", bin, got, err)
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), dir} {
		if _, err := findWorker(bad, io.Discard); err == nil {
			t.Errorf("findWorker(%q): no error", bad)
		}
	}
}
