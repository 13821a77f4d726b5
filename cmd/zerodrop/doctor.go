package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/zerodrop/zerodrop/internal/sockdiag"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
)

// Exit statuses.
const (
	exitOK       = 0 // no problem
	exitProblems = 1 // problems found
	exitUsage    = 2 // could not read the kernel, or a bad command line
)

// watchInterval is the time between the two counter reads of --watch.
const watchInterval = time.Second

// kernel is what doctor reads. linuxKernel reads the real one; tests replace
// single functions to provoke what the real kernel cannot honestly do.
type kernel struct {
	netns func() (uint64, error)
	// groups reads the groups on port (0: every port) with their holders
	// and member CPUs, as reuseport.InspectPort and Group.ReadCPUs do.
	groups     func(ctx context.Context, port uint16) ([]*reuseport.Group, error)
	migrateReq func() (bool, error)
	counters   func() (reuseport.Counters, error)
	onlineCPUs func() ([]int, error)
	// steer reads the slot table of the steering group pinned under dir
	// for addr, and the group's pin directory.
	steer func(ctx context.Context, dir string, addr netip.AddrPort) ([]steer.Slot, string, error)
	// pause runs between the two counter reads of --watch.
	pause func(ctx context.Context) error
}

// linuxKernel reads the calling thread's network namespace.
func linuxKernel() kernel {
	return kernel{
		netns:      sockdiag.NetNS,
		groups:     readGroupCPUs,
		migrateReq: reuseport.MigrationEnabled,
		counters:   reuseport.ReadCounters,
		onlineCPUs: reuseport.OnlineCPUs,
		steer:      readSteerSlots,
		pause:      sleep(watchInterval),
	}
}

// readGroupCPUs reads the groups on port and their members' CPUs.
func readGroupCPUs(ctx context.Context, port uint16) ([]*reuseport.Group, error) {
	gs, err := reuseport.InspectPort(ctx, port)
	for _, g := range gs {
		g.ReadCPUs()
	}
	return gs, err
}

func sleep(d time.Duration) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// options are doctor's flags.
type options struct {
	port  uint16 // 0: every port
	json  bool
	watch bool
	bpffs string // directory of the steering pins
}

// doctorMain parses the flags, reads the kernel, prints the report and
// returns the exit status.
func doctorMain(ctx context.Context, args []string, stdout, stderr io.Writer, k kernel) int {
	opts, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	r, err := examine(ctx, k, opts)
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop doctor: could not read the kernel: %v\n", err)
		return exitUsage
	}
	if opts.json {
		err = writeJSON(stdout, r)
	} else {
		err = writeTable(stdout, r)
	}
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop doctor: %v\n", err)
		return exitUsage
	}
	if len(r.Problems) > 0 {
		return exitProblems
	}
	return exitOK
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("zerodrop doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Uint("port", 0, "show only the listeners on this port (0: all)")
	var o options
	fs.BoolVar(&o.json, "json", false, "print one JSON object instead of the table")
	fs.BoolVar(&o.watch, "watch", false, "read the counters twice, "+watchInterval.String()+" apart, and report ListenOverflows rising")
	fs.StringVar(&o.bpffs, "bpffs", steer.DefaultDir, "directory on a bpf filesystem where reuseport/steer pins its groups")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "zerodrop doctor: unexpected argument %q\n", fs.Arg(0))
		return o, errors.New("unexpected argument")
	}
	if *port > 65535 {
		fmt.Fprintf(stderr, "zerodrop doctor: --port %d is not a port\n", *port)
		return o, errors.New("bad port")
	}
	o.port = uint16(*port)
	return o, nil
}

// report is everything doctor found; it is also the --json output.
type report struct {
	NetNS uint64 `json:"netns"` // inode of the network namespace read
	// MigrateReq is net.ipv4.tcp_migrate_req (0 or 1); null on kernels
	// without it (before 5.14).
	MigrateReq *int    `json:"migrate_req"`
	Groups     []group `json:"groups"`
	// OnlineCPUs are the CPUs that may handle a SYN, which a group whose
	// members set SO_INCOMING_CPU must cover.
	OnlineCPUs []int              `json:"online_cpus"`
	Counters   reuseport.Counters `json:"counters"`
	// Delta is the counters' rise over WatchSeconds (--watch only).
	Delta        *reuseport.Counters `json:"counters_delta,omitempty"`
	WatchSeconds float64             `json:"watch_seconds,omitempty"`
	Notes        []string            `json:"notes,omitempty"`
	Problems     []problem           `json:"problems"`
}

// group is the listeners bound to one address:port; more than one member
// means a SO_REUSEPORT group.
type group struct {
	Address string   `json:"address"`
	Port    uint16   `json:"port"`
	Members []member `json:"members"`
	// Steer is the steering group pinned for the address, if any.
	Steer *steerInfo `json:"steer,omitempty"`
}

// member is one listening socket.
type member struct {
	Inode    uint64   `json:"inode"`
	UID      uint32   `json:"uid"`      // socket owner
	PIDs     []int    `json:"pids"`     // processes holding it
	Commands []string `json:"commands"` // their /proc/PID/comm, in PIDs order
	Queue    uint32   `json:"queue"`    // accept-queue length
	Backlog  uint32   `json:"backlog"`  // listen backlog; the queue holds backlog+1
	Cookie   uint64   `json:"cookie"`   // SO_COOKIE
	// CPU is the member's SO_INCOMING_CPU: a CPU, -1 (not set) or -2 (no
	// holder let us read it).
	CPU int `json:"cpu"`
}

// problem is one thing wrong, with a stable code.
type problem struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Fix     string `json:"fix"`
}

// examine reads the kernel: counters first, so that with --watch the groups
// shown are those after the interval.
func examine(ctx context.Context, k kernel, o options) (*report, error) {
	r := &report{}
	var err error
	if r.Counters, err = k.counters(); err != nil {
		return nil, err
	}
	if o.watch {
		start := time.Now()
		if err := k.pause(ctx); err != nil {
			return nil, fmt.Errorf("watch: %w", err)
		}
		now, err := k.counters()
		if err != nil {
			return nil, err
		}
		d := now.Sub(r.Counters)
		r.Counters, r.Delta = now, &d
		r.WatchSeconds = time.Since(start).Round(time.Millisecond).Seconds()
	}
	if r.NetNS, err = k.netns(); err != nil {
		return nil, err
	}
	if r.MigrateReq, err = readMigrateReq(k); err != nil {
		return nil, err
	}
	if r.Groups, r.Notes, err = readGroups(ctx, k, o.port); err != nil {
		return nil, err
	}
	if r.OnlineCPUs, err = k.onlineCPUs(); err != nil {
		return nil, err
	}
	r.Notes = append(r.Notes, readSteer(ctx, k, o.bpffs, r.Groups)...)
	r.Problems = diagnose(r)
	return r, nil
}

func readMigrateReq(k kernel) (*int, error) {
	on, err := k.migrateReq()
	if errors.Is(err, reuseport.ErrNotSupported) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	v := 0
	if on {
		v = 1
	}
	return &v, nil
}

// readGroups reads the groups on port (0: all), sorted by port and address,
// members by inode, in doctor's report shape.
func readGroups(ctx context.Context, k kernel, port uint16) ([]group, []string, error) {
	gs, err := k.groups(ctx, port)
	if err != nil {
		return nil, nil, err
	}
	var notes []string
	if len(gs) > 0 && len(gs[0].Unreadable) > 0 {
		notes = append(notes, unreadableNote(gs[0].Unreadable))
	}
	groups := make([]group, len(gs))
	for i, g := range gs {
		groups[i] = group{Address: g.Addr.Addr().String(), Port: g.Addr.Port()}
		for _, m := range g.Members {
			dm := member{Inode: m.Inode, UID: m.UID, Queue: m.Queue, Backlog: m.Backlog, Cookie: m.Cookie, PIDs: []int{}, Commands: []string{}, CPU: m.CPU}
			for _, p := range m.Processes {
				dm.PIDs = append(dm.PIDs, p.PID)
				dm.Commands = append(dm.Commands, p.Comm)
			}
			groups[i].Members = append(groups[i].Members, dm)
		}
	}
	return groups, notes, nil
}

// unreadableNote says whose fds could not be read.
func unreadableNote(pids []int) string {
	const show = 10
	list := fmt.Sprint(pids[:min(len(pids), show)])
	if len(pids) > show {
		list = list[:len(list)-1] + " ...]"
	}
	return fmt.Sprintf("could not read the fds of %d process(es) %s (another user's, without root?): PIDs may be missing", len(pids), list)
}
