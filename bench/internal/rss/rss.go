// Package rss reads a process's resident memory, for the memory benchmark's
// workers.
package rss

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// Self returns VmRSS of /proc/self/status, in KiB.
func Self() (int, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	return parse(b)
}

// parse finds "VmRSS:   1234 kB" in a /proc/<pid>/status.
func parse(status []byte) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		}
	}
	return 0, fmt.Errorf("no VmRSS in status")
}

// Handler answers GET /rss with VmRSS in KiB, and anything else with "ok".
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/rss" {
			w.Write([]byte("ok\n"))
			return
		}
		kib, err := Self()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, kib)
	})
}
