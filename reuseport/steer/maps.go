package steer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// slotValue is an entry of the slots map; the program reads it at these offsets.
type slotValue struct {
	State  uint32
	Class  uint32
	Weight uint32
	Load   uint32
}

const (
	offState  = 0
	offClass  = 4
	offWeight = 8
	offLoad   = 12
)

// counterValue is an entry of the per-CPU counters map.
type counterValue struct {
	Steered, MigratedIn, MigratedOut, Dropped uint64
}

const (
	offSteered     = 0
	offMigratedIn  = 8
	offMigratedOut = 16
	offDropped     = 24
)

// cookieValue is what the cookies map says about a member's socket. Entries
// outlive the socket by cookieGrace (Closed is when the member left, in unix
// seconds), so that handshakes that complete after a listener closed still
// migrate by its class.
type cookieValue struct {
	Slot   uint32
	Class  uint32
	Closed uint32
	_      uint32
}

const (
	offCookieSlot  = 0
	offCookieClass = 4
)

// configValue is the single entry of the config map.
type configValue struct {
	Mismatch uint32
	Balance  uint32
}

const (
	offConfigMismatch = 0
	offConfigBalance  = 4
)

// cookiesPerSlot sizes the cookies map: room for the members that left in the
// last cookieGrace.
const cookiesPerSlot = 16

// objects are the program and maps of one group, as pinned in one directory.
type objects struct {
	prog     *ebpf.Program
	sockets  *ebpf.Map // REUSEPORT_SOCKARRAY: slot -> socket
	slots    *ebpf.Map // ARRAY: slot -> slotValue
	counters *ebpf.Map // PERCPU_ARRAY: slot -> counterValue
	cookies  *ebpf.Map // HASH: socket cookie -> cookieValue
	config   *ebpf.Map // ARRAY[1]: configValue
}

// The pin names, in the order they are created; the program is pinned last, so
// its pin marks a complete group.
var pinNames = []string{refSockets, refSlots, refCounters, refCookies, refConfig, "prog"}

func (o *objects) maps() []*ebpf.Map {
	return []*ebpf.Map{o.sockets, o.slots, o.counters, o.cookies, o.config}
}

// Close releases the fds (not the pins). Safe on a partial set.
func (o *objects) Close() error {
	var errs []error
	for _, m := range o.maps() {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	if o.prog != nil {
		errs = append(errs, o.prog.Close())
	}
	return errors.Join(errs...)
}

func mapSpecs(n uint32) []*ebpf.MapSpec {
	return []*ebpf.MapSpec{
		{Name: "zd_sockets", Type: ebpf.ReusePortSockArray, KeySize: 4, ValueSize: 8, MaxEntries: n},
		{Name: "zd_slots", Type: ebpf.Array, KeySize: 4, ValueSize: 16, MaxEntries: n},
		{Name: "zd_counters", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 32, MaxEntries: n},
		{Name: "zd_cookies", Type: ebpf.Hash, KeySize: 8, ValueSize: 16, MaxEntries: cookiesPerSlot * n},
		{Name: "zd_config", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1},
	}
}

// create makes the maps and loads the program for n slots.
func create(n uint32, cv configValue) (*objects, error) {
	o := &objects{}
	ms := make([]*ebpf.Map, 0, 5)
	for _, spec := range mapSpecs(n) {
		m, err := ebpf.NewMap(spec)
		if err != nil {
			o.setMaps(ms)
			o.Close()
			return nil, fmt.Errorf("create map %s: %w", spec.Name, err)
		}
		ms = append(ms, m)
	}
	o.setMaps(ms)
	if err := o.config.Put(uint32(0), cv); err != nil {
		o.Close()
		return nil, fmt.Errorf("write config: %w", err)
	}
	prog, err := load(int32(n), o)
	if err != nil {
		o.Close()
		return nil, err
	}
	o.prog = prog
	return o, nil
}

func (o *objects) setMaps(ms []*ebpf.Map) {
	ptrs := []**ebpf.Map{&o.sockets, &o.slots, &o.counters, &o.cookies, &o.config}
	for i, m := range ms {
		*ptrs[i] = m
	}
}

// load verifies and loads the program against the maps of o.
func load(n int32, o *objects) (*ebpf.Program, error) {
	insns := program(n)
	refs := map[string]*ebpf.Map{refSockets: o.sockets, refSlots: o.slots, refCounters: o.counters, refCookies: o.cookies, refConfig: o.config}
	for name, m := range refs {
		if err := insns.AssociateMap(name, m); err != nil {
			return nil, fmt.Errorf("associate map %s: %w", name, err)
		}
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "zerodrop_steer",
		Type:         ebpf.SkReuseport,
		AttachType:   ebpf.AttachSkReuseportSelectOrMigrate,
		Instructions: insns,
		License:      "Dual MIT/GPL",
	})
	if err != nil {
		return nil, fmt.Errorf("load program: %w", err)
	}
	return prog, nil
}

// pin pins every object in dir; on error it removes the pins it made.
func (o *objects) pin(dir string) error {
	pinners := []interface{ Pin(string) error }{o.sockets, o.slots, o.counters, o.cookies, o.config, o.prog}
	for i, p := range pinners {
		if err := p.Pin(filepath.Join(dir, pinNames[i])); err != nil {
			unpin(dir)
			return fmt.Errorf("pin %s: %w", pinNames[i], err)
		}
	}
	return nil
}

// unpin removes every pin of a group directory, and the directory.
func unpin(dir string) error {
	var errs []error
	for i := len(pinNames) - 1; i >= 0; i-- {
		if err := os.Remove(filepath.Join(dir, pinNames[i])); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// openPinned opens the objects pinned in dir. A missing program pin means
// there is no complete group: os.ErrNotExist.
func openPinned(dir string) (*objects, error) {
	prog, err := ebpf.LoadPinnedProgram(filepath.Join(dir, "prog"), nil)
	if err != nil {
		return nil, fmt.Errorf("open pinned program: %w", err)
	}
	o := &objects{prog: prog}
	ms := make([]*ebpf.Map, 0, 5)
	for _, name := range pinNames[:5] {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			o.setMaps(ms)
			o.Close()
			return nil, fmt.Errorf("open pinned map %s: %w", name, err)
		}
		ms = append(ms, m)
	}
	o.setMaps(ms)
	if err := o.compatible(); err != nil {
		o.Close()
		return nil, err
	}
	return o, nil
}

// compatible checks that pinned objects have the layout this version
// expects (pinned by another version of the package, they may not).
func (o *objects) compatible() error {
	if o.prog.Type() != ebpf.SkReuseport {
		return fmt.Errorf("pinned program of type %s: %w", o.prog.Type(), ErrIncompatible)
	}
	n := o.sockets.MaxEntries()
	if n == 0 || n > MaxSlots {
		return fmt.Errorf("pinned sockarray of %d slots: %w", n, ErrIncompatible)
	}
	for i, spec := range mapSpecs(n) {
		if err := spec.Compatible(o.maps()[i]); err != nil {
			return fmt.Errorf("pinned map %s: %w: %w", pinNames[i], ErrIncompatible, err)
		}
	}
	return nil
}
