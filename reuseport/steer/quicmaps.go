package steer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
)

// quicGens is the size of a QUIC group's tables: one entry per value of the
// generation byte.
const quicGens = 256

// initialsLen bounds the initials map (an LRU: a flood of Initials evicts
// the oldest handshakes, whose later datagrams then go to the newest).
const initialsLen = 8192

// quicConfig is the single entry of a QUIC group's config map: the newest
// generation, and the connection ID layout the program was built for.
type quicConfig struct {
	Newest    uint32
	CIDLen    uint32
	GenOffset uint32
	_         uint32
}

const offQUICNewest = 0

// clientKey is a key of the initials map: a client during its handshake.
type clientKey struct {
	Hash    uint32 // the kernel's hash of the datagram's addresses and ports
	SCIDLen uint32
	SCID    [24]byte // the client's SCID, zero-padded
}

const (
	offClientHash    = 0
	offClientSCIDLen = 4
	offClientSCID    = 8
)

// initialValue is a value of the initials map.
type initialValue struct {
	Gen  uint32 // generation byte
	_    uint32
	Seen uint64 // CLOCK_MONOTONIC ns of the client's last Initial
}

const (
	offInitialGen  = 0
	offInitialSeen = 8
)

// quicCounters is an entry of the per-CPU counters of a QUIC group.
type quicCounters struct {
	ByID, Remembered, Newest, Fallback uint64
}

// quicObjects are the program and maps of one QUIC group.
type quicObjects struct {
	prog     *ebpf.Program
	sockets  *ebpf.Map // REUSEPORT_SOCKARRAY: generation byte -> socket
	counters *ebpf.Map // PERCPU_ARRAY: generation byte -> quicCounters
	initials *ebpf.Map // LRU_HASH: clientKey -> initialValue
	config   *ebpf.Map // ARRAY[1]: quicConfig
}

// The pin names of a QUIC group; the program last (its pin marks a
// complete group).
var quicPinNames = []string{refSockets, refQUICCounters, refInitials, refConfig, "prog"}

func quicMapSpecs() []*ebpf.MapSpec {
	return []*ebpf.MapSpec{
		{Name: "zd_q_sockets", Type: ebpf.ReusePortSockArray, KeySize: 4, ValueSize: 8, MaxEntries: quicGens},
		{Name: "zd_q_counters", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 32, MaxEntries: quicGens},
		{Name: "zd_q_initials", Type: ebpf.LRUHash, KeySize: uint32(binary.Size(clientKey{})), ValueSize: uint32(binary.Size(initialValue{})), MaxEntries: initialsLen},
		{Name: "zd_q_config", Type: ebpf.Array, KeySize: 4, ValueSize: 16, MaxEntries: 1},
	}
}

func (o *quicObjects) mapPtrs() []**ebpf.Map {
	return []**ebpf.Map{&o.sockets, &o.counters, &o.initials, &o.config}
}

// Close releases the fds (not the pins). Safe on a partial set.
func (o *quicObjects) Close() error {
	var errs []error
	for _, m := range o.mapPtrs() {
		if *m != nil {
			errs = append(errs, (*m).Close())
		}
	}
	if o.prog != nil {
		errs = append(errs, o.prog.Close())
	}
	return errors.Join(errs...)
}

// createQUIC makes the maps and loads the program for layout q.
func createQUIC(q QUIC) (*quicObjects, error) {
	o := &quicObjects{}
	for i, spec := range quicMapSpecs() {
		m, err := ebpf.NewMap(spec)
		if err != nil {
			o.Close()
			return nil, fmt.Errorf("create map %s: %w", spec.Name, err)
		}
		*o.mapPtrs()[i] = m
	}
	cfg := quicConfig{Newest: quicGens, CIDLen: uint32(q.CIDLen), GenOffset: uint32(q.GenOffset)}
	if err := o.config.Put(uint32(0), cfg); err != nil {
		o.Close()
		return nil, fmt.Errorf("write config: %w", err)
	}
	insns := quicProgram(int32(q.CIDLen), int32(q.GenOffset))
	refs := map[string]*ebpf.Map{refSockets: o.sockets, refQUICCounters: o.counters, refInitials: o.initials, refConfig: o.config}
	for name, m := range refs {
		if err := insns.AssociateMap(name, m); err != nil {
			o.Close()
			return nil, fmt.Errorf("associate map %s: %w", name, err)
		}
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "zerodrop_quic",
		Type:         ebpf.SkReuseport,
		AttachType:   ebpf.AttachSkReuseportSelect,
		Instructions: insns,
		License:      "Dual MIT/GPL",
	})
	if err != nil {
		o.Close()
		return nil, fmt.Errorf("load program: %w", err)
	}
	o.prog = prog
	return o, nil
}

// pin pins every object in dir; on error it removes the pins it made.
func (o *quicObjects) pin(dir string) error {
	pinners := []interface{ Pin(string) error }{o.sockets, o.counters, o.initials, o.config, o.prog}
	for i, p := range pinners {
		if err := p.Pin(filepath.Join(dir, quicPinNames[i])); err != nil {
			unpinQUIC(dir)
			return fmt.Errorf("pin %s: %w", quicPinNames[i], err)
		}
	}
	return nil
}

// unpinQUIC removes the pins of a QUIC group directory.
func unpinQUIC(dir string) error {
	var errs []error
	for i := len(quicPinNames) - 1; i >= 0; i-- {
		if err := os.Remove(filepath.Join(dir, quicPinNames[i])); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// openQUIC opens the QUIC group pinned in dir and checks it was built for
// layout q. A missing program pin: os.ErrNotExist.
func openQUIC(dir string, q QUIC) (*quicObjects, error) {
	prog, err := ebpf.LoadPinnedProgram(filepath.Join(dir, "prog"), nil)
	if err != nil {
		return nil, fmt.Errorf("open pinned program: %w", err)
	}
	o := &quicObjects{prog: prog}
	specs := quicMapSpecs()
	for i, name := range quicPinNames[:len(specs)] {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, name), nil)
		if err != nil {
			o.Close()
			return nil, fmt.Errorf("open pinned map %s: %w", name, err)
		}
		*o.mapPtrs()[i] = m
		if err := specs[i].Compatible(m); err != nil {
			o.Close()
			return nil, fmt.Errorf("pinned map %s: %w: %w", name, ErrIncompatible, err)
		}
	}
	var cfg quicConfig
	if err := o.config.Lookup(uint32(0), &cfg); err != nil {
		o.Close()
		return nil, fmt.Errorf("read config: %w", err)
	}
	if cfg.CIDLen != uint32(q.CIDLen) || cfg.GenOffset != uint32(q.GenOffset) {
		o.Close()
		return nil, fmt.Errorf("%w: the group reads generations at byte %d of %d-byte IDs, not %d of %d",
			ErrIncompatible, cfg.GenOffset, cfg.CIDLen, q.GenOffset, q.CIDLen)
	}
	return o, nil
}
