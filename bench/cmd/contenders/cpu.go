package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat (100
// on every Linux architecture Go supports).
const clockTicks = 100

// cpuTrack follows the CPU time (user + system) of the Go workers of a run:
// the pids they announce ("ready <pid> ...") and the total each reports at
// exit ("cpu <pid> <ns>", getrusage RUSAGE_SELF).
type cpuTrack struct {
	// proc is the procfs of the workers' PID namespace (procDir).
	proc  string
	mu    sync.Mutex
	pids  map[int]bool
	exits map[int]int64 // ns, reported at exit
	last  map[int]int64 // ns, the last /proc sample of a live pid
}

func (t *cpuTrack) see(pid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pids == nil {
		t.pids = map[int]bool{}
	}
	t.pids[pid] = true
}

func (t *cpuTrack) exited(pid int, ns int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exits == nil {
		t.exits = map[int]int64{}
	}
	t.exits[pid] = ns
}

// total is the CPU time the workers have used so far, in ns: a live worker's
// (or a zombie's) from /proc/PID/stat, an exited one's as it reported it, or,
// for one gone whose report is not read yet, its last sample. A worker that
// has not announced itself yet counts from the next sample on: its start
// counts in the next interval.
func (t *cpuTrack) total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil {
		t.last = map[int]int64{}
	}
	var sum int64
	for pid := range t.pids {
		if ns, ok := t.exits[pid]; ok {
			sum += ns
		} else if ns, ok := procCPU(t.proc, pid); ok {
			t.last[pid] = ns
			sum += ns
		} else {
			sum += t.last[pid]
		}
	}
	return sum
}

// procCPU reads utime + stime of pid, in ns, from the procfs at proc.
func procCPU(proc string, pid int) (int64, bool) {
	b, err := os.ReadFile(proc + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The fields after the command, which ends with the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, false
	}
	u, uerr := strconv.ParseInt(string(f[11]), 10, 64)
	s, serr := strconv.ParseInt(string(f[12]), 10, 64)
	if uerr != nil || serr != nil {
		return 0, false
	}
	return (u + s) * int64(time.Second/clockTicks), true
}

// cpuUse is the workers' CPU time and the requests answered over two phases
// of a run: Steady, from half the lead (every client connected) until the
// first restart began, and Restarts, from then until the tail's end.
type cpuUse struct {
	SteadyNS       int64   `json:"steady_ns"`
	SteadyMS       float64 `json:"steady_ms"` // wall time
	SteadyRequests int64   `json:"steady_requests"`
	RestartsNS     int64   `json:"restarts_ns"`
	RestartsMS     float64 `json:"restarts_ms"` // wall time
	// RestartsRequests are the requests the load counted in the phase.
	RestartsRequests int64 `json:"restarts_requests"`
	WorkersSeen      int   `json:"workers_seen"` // workers that reported at exit
}

// cpuPhases samples t, and the load's request count, at the phases'
// bounds: at half the lead (a timer), at the first mark (wrap the load's
// Mark with mark), and at finish.
type cpuPhases struct {
	t     *cpuTrack
	count func() int64
	mu    sync.Mutex
	at    [3]time.Time
	ns    [3]int64
	reqs  [3]int64
	timer *time.Timer
}

func newCPUPhases(t *cpuTrack, lead time.Duration, count func() int64) *cpuPhases {
	p := &cpuPhases{t: t, count: count}
	p.timer = time.AfterFunc(lead/2, func() { p.sample(0) })
	return p
}

func (p *cpuPhases) sample(i int) {
	ns, reqs := p.t.total(), p.count()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at[i].IsZero() || (i == 1 && p.at[0].IsZero()) {
		return // once each; no restart phase without a steady one
	}
	p.at[i], p.ns[i], p.reqs[i] = time.Now(), ns, reqs
}

// mark wraps the load's Mark: the first mark starts the restart phase.
func (p *cpuPhases) mark(next func(string)) func(string) {
	return func(m string) {
		p.sample(1)
		next(m)
	}
}

// finish ends the restart phase; call it before the workers stop.
func (p *cpuPhases) finish() {
	p.timer.Stop()
	p.sample(2)
}

// result returns the use once the workers' reports are read, or nil when a
// phase is missing (a run without restarts) or no worker reported its CPU
// (not Go workers).
func (p *cpuPhases) result() *cpuUse {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at[0].IsZero() || p.at[1].IsZero() || p.at[2].IsZero() {
		return nil
	}
	p.t.mu.Lock()
	seen := len(p.t.exits)
	p.t.mu.Unlock()
	if seen == 0 {
		return nil
	}
	ms := func(a, b time.Time) float64 { return float64(b.Sub(a).Microseconds()) / 1000 }
	return &cpuUse{SteadyNS: p.ns[1] - p.ns[0], SteadyMS: ms(p.at[0], p.at[1]), SteadyRequests: p.reqs[1] - p.reqs[0],
		RestartsNS: p.ns[2] - p.ns[1], RestartsMS: ms(p.at[1], p.at[2]), RestartsRequests: p.reqs[2] - p.reqs[1], WorkersSeen: seen}
}

// procDir returns a procfs of this process's PID namespace: /proc, or in a
// run child (PID 1 of a new PID namespace, whose /proc is still the
// machine's) a procfs mounted in dir/proc, in the run child's own mount
// namespace (gone with it), and what unmounts it.
func procDir(dir string) (string, func(), error) {
	if !mountNS {
		return "/proc", func() {}, nil
	}
	if err := privateMounts("a procfs of the run's PID namespace"); err != nil {
		return "", nil, err
	}
	p := filepath.Join(dir, "proc")
	if err := os.Mkdir(p, 0o555); err != nil {
		return "", nil, err
	}
	if err := unix.Mount("proc", p, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return "", nil, &os.PathError{Op: "mount proc", Path: p, Err: err}
	}
	return p, func() { unix.Unmount(p, unix.MNT_DETACH) }, nil
}
