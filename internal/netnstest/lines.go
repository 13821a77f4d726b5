package netnstest

import (
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Lines is a helper process's output, read line by line in order.
type Lines struct{ ch <-chan string }

// ReadLines reads r (a helper's Stdout) until EOF.
func ReadLines(r io.Reader) *Lines { return &Lines{ch: readLines(r)} }

// Expect waits up to 60 s for the next line, checks that its first word is
// word, and returns its words.
func (l *Lines) Expect(tb testing.TB, word string) []string {
	tb.Helper()
	select {
	case line, ok := <-l.ch:
		f := strings.Fields(line)
		if !ok || len(f) == 0 || f[0] != word {
			tb.Fatalf("helper said %q (open=%v), want %q ...", line, ok, word)
		}
		return f
	case <-time.After(60 * time.Second):
		tb.Fatalf("no %q line from the helper in 60 s", word)
	}
	return nil
}

// Field returns word i (from 0) of a helper's line as an integer, failing
// the test if the line has no such word or it is not one.
func Field(tb testing.TB, line string, i int) int {
	tb.Helper()
	f := strings.Fields(line)
	if len(f) <= i {
		tb.Fatalf("line %q: no field %d", line, i)
	}
	v, err := strconv.Atoi(f[i])
	if err != nil {
		tb.Fatalf("line %q: %v", line, err)
	}
	return v
}
