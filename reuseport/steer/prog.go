package steer

import (
	"github.com/cilium/ebpf/asm"
)

// Offsets in struct sk_reuseport_md (include/uapi/linux/bpf.h).
const (
	mdData        = 0
	mdDataEnd     = 8
	mdSk          = 40
	mdMigratingSk = 48
)

// Return codes of a BPF_PROG_TYPE_SK_REUSEPORT program.
const (
	skDrop = 0
	skPass = 1
)

// Stack slots of the program (offsets from R10).
const (
	fpKey    = -4  // u32 key for slot look-ups
	fpSelect = -8  // u32 key given to bpf_sk_select_reuseport
	fpSrc    = -12 // u32 slot of the closing listener (nslots if unknown)
	fpCookie = -24 // u64 socket cookie of the closing listener
	fpClass  = -36 // u32 option class of the closing listener
)

// Map references in the instructions.
const (
	refSockets  = "sockets"
	refSlots    = "slots"
	refCounters = "counters"
	refCookies  = "cookies"
	refConfig   = "config"
)

// program returns the SK_REUSEPORT program for a group of n slots (n <= 64):
// new connections are spread over live slots by weight; migrating ones go to
// the live slot of the closing listener's class with the lowest load, else
// SK_DROP or the hash, as the config map says.
func program(n int32) asm.Instructions {
	var p asm.Instructions
	p = append(p,
		asm.Mov.Reg(asm.R6, asm.R1).WithSymbol("zerodrop_steer"),
		asm.LoadMem(asm.R1, asm.R6, mdMigratingSk, asm.DWord),
		asm.JNE.Imm(asm.R1, 0, "migrate"),
	)
	p = append(p, newConn(n)...)
	p = append(p, migrate(n)...)
	p = append(p,
		asm.Mov.Imm(asm.R0, skPass).WithSymbol("pass"),
		asm.Return(),
	)
	return p
}

// lookupSlot loads the slot state of the index in R8 into R0 (or jumps to
// next when there is none, or when it is not live).
func lookupSlot(next string) asm.Instructions {
	return asm.Instructions{
		asm.StoreMem(asm.RFP, fpKey, asm.R8, asm.Word),
		asm.LoadMapPtr(asm.R1, 0).WithReference(refSlots),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, fpKey),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, next),
		asm.LoadMem(asm.R1, asm.R0, offState, asm.Word),
		asm.JNE.Imm(asm.R1, int32(Live), next),
	}
}

// lookupConfig sets R0 to the config map's one value (key 0, on the stack at
// fpKey), or jumps to miss when there is none.
func lookupConfig(miss string) asm.Instructions {
	return asm.Instructions{
		asm.StoreImm(asm.RFP, fpKey, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, 0).WithReference(refConfig),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, fpKey),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, miss),
	}
}

// count adds one to the per-CPU counter at off of the slot whose index is on
// the stack at fp, and falls through to the instruction after it.
func count(fp int16, off int16, done string) asm.Instructions {
	return asm.Instructions{
		asm.LoadMapPtr(asm.R1, 0).WithReference(refCounters),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(fp)),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, done),
		asm.LoadMem(asm.R1, asm.R0, off, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, off, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 0).WithSymbol(done),
	}
}

// selectSlot calls bpf_sk_select_reuseport with the slot in reg and jumps to
// fail if the kernel refused it. The slot stays on the stack at fpSelect.
func selectSlot(reg asm.Register, fail string) asm.Instructions {
	return asm.Instructions{
		asm.StoreMem(asm.RFP, fpSelect, reg, asm.Word),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.LoadMapPtr(asm.R2, 0).WithReference(refSockets),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, fpSelect),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnSkSelectReuseport.Call(),
		asm.JNE.Imm(asm.R0, 0, fail),
	}
}

// onlySYN jumps to other unless the packet (ctx in R6, data at the TCP header)
// is a SYN without ACK: the program also runs for segments that found no
// connection (a late ACK or FIN), which are selections but no connection.
func onlySYN(other string) asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R1, asm.R6, mdData, asm.DWord),
		asm.LoadMem(asm.R2, asm.R6, mdDataEnd, asm.DWord),
		asm.Mov.Reg(asm.R3, asm.R1),
		asm.Add.Imm(asm.R3, tcpHeaderFlags+1),
		asm.JGT.Reg(asm.R3, asm.R2, other),
		asm.LoadMem(asm.R1, asm.R1, tcpHeaderFlags, asm.Byte),
		asm.And.Imm(asm.R1, tcpSYN|tcpACK),
		asm.JNE.Imm(asm.R1, tcpSYN, other),
	}
}

// The flags byte of the TCP header.
const (
	tcpHeaderFlags = 13
	tcpSYN         = 0x02
	tcpACK         = 0x10
)

// leastLoad sets R7, the highest load a slot may have to get a new
// connection: with BalanceLeastLoaded, the lowest load among the live slots
// with a weight; otherwise no limit.
func leastLoad(n int32) asm.Instructions {
	p := asm.Instructions{asm.LoadImm(asm.R7, 0xffffffff, asm.DWord)}
	p = append(p, lookupConfig("spread")...)
	p = append(p,
		asm.LoadMem(asm.R1, asm.R0, offConfigBalance, asm.Word),
		asm.JNE.Imm(asm.R1, int32(BalanceLeastLoaded), "spread"),
		asm.Mov.Imm(asm.R8, 0),
		asm.JGE.Imm(asm.R8, n, "spread").WithSymbol("ll_loop"),
	)
	p = append(p, lookupSlot("ll_next")...)
	return append(p,
		asm.LoadMem(asm.R1, asm.R0, offWeight, asm.Word),
		asm.JEq.Imm(asm.R1, 0, "ll_next"),
		asm.LoadMem(asm.R1, asm.R0, offLoad, asm.Word),
		asm.JGE.Reg(asm.R1, asm.R7, "ll_next"),
		asm.Mov.Reg(asm.R7, asm.R1),
		asm.Add.Imm(asm.R8, 1).WithSymbol("ll_next"),
		asm.Ja.Label("ll_loop"),
	)
}

// newConn picks a live slot at random with probability weight/sum: pass one
// sums the weights in R9, pass two walks them with a random number below the
// sum. Both skip slots whose load is above R7 (see leastLoad). No live weight,
// or a refused selection, leaves the choice to the hash.
func newConn(n int32) asm.Instructions {
	p := leastLoad(n)
	p = append(p, asm.Mov.Imm(asm.R8, 0).WithSymbol("spread"), asm.Mov.Imm(asm.R9, 0))
	p = append(p, eachUnderLoad(n, "sum", "sum_done", asm.Add.Reg(asm.R9, asm.R1))...)
	p = append(p,
		asm.JEq.Imm(asm.R9, 0, "pass").WithSymbol("sum_done"),
		asm.FnGetPrandomU32.Call(),
		asm.Mod.Reg(asm.R0, asm.R9),
		asm.Mov.Reg(asm.R9, asm.R0),
		asm.Mov.Imm(asm.R8, 0),
	)
	p = append(p, eachUnderLoad(n, "pick", "pass", asm.JLT.Reg(asm.R9, asm.R1, "picked"), asm.Sub.Reg(asm.R9, asm.R1))...)
	sel := selectSlot(asm.R8, "pass")
	sel[0] = sel[0].WithSymbol("picked")
	p = append(p, sel...)
	p = append(p, onlySYN("pass")...)
	p = append(p, count(fpSelect, offSteered, "steered")...)
	p = append(p, asm.Ja.Label("pass"))
	return p
}

// eachUnderLoad walks R8 from its value to n-1 over the live slots whose
// load is at most R7 (R0: the slot's value, R1: its weight) and runs body for
// each; the loop is labelled name_loop, and leaves to done.
func eachUnderLoad(n int32, name, done string, body ...asm.Instruction) asm.Instructions {
	loop, next := name+"_loop", name+"_next"
	p := asm.Instructions{asm.JGE.Imm(asm.R8, n, done).WithSymbol(loop)}
	p = append(p, lookupSlot(next)...)
	p = append(p,
		asm.LoadMem(asm.R1, asm.R0, offLoad, asm.Word),
		asm.JGT.Reg(asm.R1, asm.R7, next),
		asm.LoadMem(asm.R1, asm.R0, offWeight, asm.Word),
	)
	p = append(p, body...)
	return append(p, asm.Add.Imm(asm.R8, 1).WithSymbol(next), asm.Ja.Label(loop))
}

// migrate picks the target of a connection that a closing listener leaves in
// its queue (R6 = ctx). The closing listener is known by its socket cookie; its
// slot and class come from the cookies map. Candidates are the live slots of
// that class. Pass one finds their lowest load (R9); pass two
// tries, in slot order, those at that load; pass three (R7 = 1) tries any
// candidate. A selection the kernel refuses (a slot whose socket is gone)
// moves on to the next candidate.
func migrate(n int32) asm.Instructions {
	p := asm.Instructions{
		asm.StoreImm(asm.RFP, fpSrc, int64(n), asm.Word).WithSymbol("migrate"),
		asm.LoadMem(asm.R1, asm.R6, mdSk, asm.DWord),
		asm.FnGetSocketCookie.Call(),
		asm.StoreMem(asm.RFP, fpCookie, asm.R0, asm.DWord),
		asm.LoadMapPtr(asm.R1, 0).WithReference(refCookies),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, fpCookie),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "mismatch"),
		asm.LoadMem(asm.R1, asm.R0, offCookieSlot, asm.Word),
		asm.StoreMem(asm.RFP, fpSrc, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R0, offCookieClass, asm.Word),
		asm.StoreMem(asm.RFP, fpClass, asm.R1, asm.Word),
		asm.Mov.Imm(asm.R8, 0),
		asm.LoadImm(asm.R9, 0xffffffff, asm.DWord),
		asm.JGE.Imm(asm.R8, n, "min_done").WithSymbol("min_loop"),
	}
	p = append(p, candidate("min_next")...)
	p = append(p,
		asm.LoadMem(asm.R1, asm.R0, offLoad, asm.Word),
		asm.JGE.Reg(asm.R1, asm.R9, "min_next"),
		asm.Mov.Reg(asm.R9, asm.R1),
		asm.Add.Imm(asm.R8, 1).WithSymbol("min_next"),
		asm.Ja.Label("min_loop"),
		asm.Mov.Imm(asm.R7, 0).WithSymbol("min_done"),
		asm.Mov.Imm(asm.R8, 0).WithSymbol("try_start"),
		asm.JGE.Imm(asm.R8, n, "try_end").WithSymbol("try_loop"),
	)
	p = append(p, candidate("try_next")...)
	p = append(p,
		asm.LoadMem(asm.R1, asm.R0, offLoad, asm.Word),
		asm.JGT.Reg(asm.R1, asm.R9, "try_next"),
	)
	p = append(p, selectSlot(asm.R8, "try_next")...)
	p = append(p, asm.Ja.Label("migrated"),
		asm.Add.Imm(asm.R8, 1).WithSymbol("try_next"),
		asm.Ja.Label("try_loop"),
		asm.JNE.Imm(asm.R7, 0, "mismatch").WithSymbol("try_end"),
		asm.Mov.Imm(asm.R7, 1),
		asm.LoadImm(asm.R9, 0xffffffff, asm.DWord),
		asm.Ja.Label("try_start"),
	)
	in := count(fpSelect, offMigratedIn, "in_counted")
	in[0] = in[0].WithSymbol("migrated")
	p = append(p, in...)
	p = append(p, count(fpSrc, offMigratedOut, "out_counted")...)
	p = append(p, asm.Ja.Label("pass"))
	p = append(p, mismatch()...)
	return p
}

// candidate looks up the slot in R8 like lookupSlot, and also jumps to next
// unless its class is the closing listener's. The closing listener's own slot
// needs no test: the kernel removed it from the sockarray before the program
// runs, so selecting it fails.
func candidate(next string) asm.Instructions {
	p := lookupSlot(next)
	return append(p,
		asm.LoadMem(asm.R1, asm.R0, offClass, asm.Word),
		asm.LoadMem(asm.R2, asm.RFP, fpClass, asm.Word),
		asm.JNE.Reg(asm.R1, asm.R2, next),
	)
}

// mismatch ends a migration that found no target: SK_PASS (the hash picks
// among the remaining members) when the config says so, else SK_DROP, which
// resets the connection and counts a drop for the closing listener's slot.
func mismatch() asm.Instructions {
	p := lookupConfig("drop")
	p[0] = p[0].WithSymbol("mismatch")
	p = append(p,
		asm.LoadMem(asm.R1, asm.R0, offConfigMismatch, asm.Word),
		asm.JEq.Imm(asm.R1, int32(MismatchHash), "pass"),
	)
	drop := count(fpSrc, offDropped, "dropped")
	drop[0] = drop[0].WithSymbol("drop")
	p = append(p, drop...)
	p = append(p,
		asm.Mov.Imm(asm.R0, skDrop),
		asm.Return(),
	)
	return p
}
