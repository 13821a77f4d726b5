package main

import (
	"debug/elf"
	"fmt"
	"io"
	"strings"
)

// linkage says how an executable is linked: "static", or "dynamic (<its ELF
// interpreter>)". A dynamically linked worker pays the loader on every start
// (3-4 ms on this benchmark's machine, idle), and the contenders that start a
// process per restart pay it in their restart gap.
func linkage(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return "", fmt.Errorf("%s: interpreter: %w", path, err)
		}
		return "dynamic (" + strings.TrimRight(string(b), "\x00") + ")", nil
	}
	return "static", nil
}

// workerLinkage describes how the worker binaries are linked, for the
// results' header, and warns on w about dynamically linked ones.
func workerLinkage(bins []string, w io.Writer) string {
	var parts []string
	for _, b := range bins {
		l, err := linkage(b)
		if err != nil {
			l = "unknown: " + err.Error()
		}
		if strings.HasPrefix(l, "dynamic") {
			fmt.Fprintf(w, "contenders: %s is dynamically linked; build the workers with CGO_ENABLED=0 (BENCHMARKS.md) so that no contender's restart pays the loader\n", b)
		}
		parts = append(parts, fmt.Sprintf("`%s` %s", b, l))
	}
	return strings.Join(parts, ", ")
}

// workerBins lists the worker binaries a run may start: the worker and its
// per-mode companions that exist beside it.
func workerBins(worker string) []string {
	bins := []string{worker}
	for _, s := range workerSuffixes {
		if p := worker + "-" + s; isExec(p) {
			bins = append(bins, p)
		}
	}
	return bins
}
