package steer

import (
	"time"

	"github.com/cilium/ebpf/asm"
)

// Where the QUIC program finds things. The program's context points at the
// UDP header (the kernel runs reuseport programs before pulling it); the
// QUIC packet starts after it.
const (
	udpHeaderLen = 8
	maxCIDLen    = 20 // RFC 9000: a connection ID is at most 20 bytes
	quicVersion1 = 0x00000001
	quicVersion2 = 0x6b3343cf
)

// Stack of the QUIC program (offsets from R10). fpSelect (-8, the select key)
// and fpKey (-4, the config key) are shared with the TCP program's helpers.
const (
	fpHdr     = -16 // the first 6 bytes of the datagram, then the SCID length (8 zeroed)
	fpDCID    = -40 // a DCID of ours at fpDCID+1 (24 zeroed bytes)
	fpClient  = -72 // the initials map's key (clientKey, 32 zeroed bytes)
	fpInitial = -88 // the initials map's value (initialValue, 16 bytes)
)

// mdHash is the offset in struct sk_reuseport_md of the kernel's hash of the
// datagram's addresses and ports.
const mdHash = 32

// initialTTL is how long after a client's last Initial the program still
// routes its next one to the same generation (quic-go's default handshake
// idle timeout is 5 s).
const initialTTL = 10 * time.Second

// Offsets in quicCounters, the per-generation counters.
const (
	offByID       = 0
	offRemembered = 8
	offNewest     = 16
	offFallback   = 24
)

// Map references of the QUIC program (sockets and config as the TCP one's).
const (
	refQUICCounters = "quic_counters"
	refInitials     = "initials"
)

// quicProgram returns the SK_REUSEPORT program of a QUIC group whose
// connection IDs are cidLen bytes with the generation's low byte at genOff.
// It picks the socket sockets[generation]:
//
//   - a short header packet, or a long header packet other than Initial and
//     0-RTT: the generation its DCID names (counted ByID);
//   - an Initial or 0-RTT packet: the generation remembered for its client
//     (its addresses and SCID) in the initials map (Remembered), else the
//     newest generation, which the program remembers for the client
//     (Newest): every Initial of a handshake (the second datagram of a
//     ClientHello, an ACK once the client heard from the server) follows the
//     first, and a new client never lands on an older generation, whatever
//     its DCID says;
//   - a datagram too short to hold what it needs, of an unknown QUIC
//     version, or naming a generation with no socket: the newest (Fallback).
//
// When even the newest has no socket, the kernel's hash picks.
func quicProgram(cidLen, genOff int32) asm.Instructions {
	p := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1).WithSymbol("zerodrop_quic"),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, fpHdr, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, fpDCID, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, fpDCID+8, asm.R1, asm.DWord),
		asm.StoreMem(asm.RFP, fpDCID+16, asm.R1, asm.DWord),
	}
	for off := int16(0); off < 32; off += 8 {
		p = append(p, asm.StoreMem(asm.RFP, fpClient+off, asm.R1, asm.DWord))
	}
	p = append(p, loadBytes(udpHeaderLen, fpHdr, 1, "bad")...)
	p = append(p,
		asm.LoadMem(asm.R1, asm.RFP, fpHdr, asm.Byte),
		asm.And.Imm(asm.R1, 0x80),
		asm.JNE.Imm(asm.R1, 0, "long"),
	)
	// A short header: the DCID follows the first byte.
	p = append(p, loadBytes(udpHeaderLen+1, fpDCID+1, cidLen, "bad")...)
	p = append(p, asm.Ja.Label("by_id"))
	p = append(p, longHeader()...)
	// Handshake (or Retry): a DCID of ours.
	p = append(p, asm.JNE.Imm(asm.R7, cidLen, "bad").WithSymbol("handshake"))
	p = append(p, loadBytes(udpHeaderLen+6, fpDCID+1, cidLen, "bad")...)
	p = append(p,
		asm.LoadMem(asm.R8, asm.RFP, fpDCID+1+int16(genOff), asm.Byte).WithSymbol("by_id"),
		asm.Mov.Imm(asm.R9, offByID),
	)
	p = append(p, selectSlot(asm.R8, "fallback")...)
	p = append(p, asm.Ja.Label("counted"))
	p = append(p, initial()...)
	p = append(p, asm.Mov.Imm(asm.R9, offFallback).WithSymbol("bad"), asm.Ja.Label("newest"))
	p = append(p, asm.Mov.Imm(asm.R9, offFallback).WithSymbol("fallback"))
	p = append(p, newest("newest", "pass")...)
	p = append(p, asm.Ja.Label("counted"))
	p = append(p, countAt()...)
	p = append(p,
		asm.Mov.Imm(asm.R0, skPass).WithSymbol("pass"),
		asm.Return(),
	)
	return p
}

// loadBytes copies n bytes of the datagram at off (from the UDP header) to
// the stack at fp, or jumps to short when the datagram is shorter.
func loadBytes(off int32, fp int16, n int32, short string) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, off),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, int32(fp)),
		asm.Mov.Imm(asm.R4, n),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, short),
	}
}

// longHeader reads a long header's first 6 bytes: R7 the DCID length, then
// jumps to initial (Initial, 0-RTT), handshake (the other types), or bad
// (an unknown version: the newest answers it, with a version negotiation).
func longHeader() asm.Instructions {
	p := loadBytes(udpHeaderLen, fpHdr, 6, "bad")
	p[0] = p[0].WithSymbol("long")
	p = append(p,
		asm.LoadMem(asm.R7, asm.RFP, fpHdr+5, asm.Byte),
		asm.JGT.Imm(asm.R7, maxCIDLen, "bad"),
		asm.Mov.Imm(asm.R1, 0),
	)
	for i := int16(1); i <= 4; i++ {
		p = append(p,
			asm.LSh.Imm(asm.R1, 8),
			asm.LoadMem(asm.R2, asm.RFP, fpHdr+i, asm.Byte),
			asm.Or.Reg(asm.R1, asm.R2),
		)
	}
	return append(p,
		asm.LoadMem(asm.R2, asm.RFP, fpHdr, asm.Byte),
		asm.RSh.Imm(asm.R2, 4),
		asm.And.Imm(asm.R2, 3),
		asm.JEq.Imm(asm.R1, quicVersion1, "v1"),
		asm.JEq.Imm(asm.R1, quicVersion2, "v2"),
		asm.Ja.Label("bad"),
		// RFC 9000: Initial 0, 0-RTT 1; RFC 9369 (v2): Initial 1, 0-RTT 2.
		asm.JEq.Imm(asm.R2, 0, "initial").WithSymbol("v1"),
		asm.JEq.Imm(asm.R2, 1, "initial"),
		asm.Ja.Label("handshake"),
		asm.JEq.Imm(asm.R2, 1, "initial").WithSymbol("v2"),
		asm.JEq.Imm(asm.R2, 2, "initial"),
		asm.Ja.Label("handshake"),
	)
}

// initial routes an Initial or 0-RTT packet whose DCID is R7 bytes long,
// by its client: the kernel's hash of the datagram's addresses and ports,
// and the client's SCID (the same for every Initial of a handshake, whether
// its DCID is the one the client chose or one the server gave it). A client
// the initials map remembered for up to initialTTL since its last Initial
// goes to the same generation; any other to the newest, remembered.
func initial() asm.Instructions {
	p := asm.Instructions{
		// The SCID length, after the DCID.
		asm.Mov.Reg(asm.R1, asm.R6).WithSymbol("initial"),
		asm.Mov.Reg(asm.R2, asm.R7),
		asm.Add.Imm(asm.R2, udpHeaderLen+6),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, fpHdr+6),
		asm.Mov.Imm(asm.R4, 1),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "bad"),
		asm.LoadMem(asm.R9, asm.RFP, fpHdr+6, asm.Byte),
		asm.JGT.Imm(asm.R9, maxCIDLen, "bad"),
		asm.LoadMem(asm.R1, asm.R6, mdHash, asm.Word),
		asm.StoreMem(asm.RFP, fpClient+offClientHash, asm.R1, asm.Word),
		asm.StoreMem(asm.RFP, fpClient+offClientSCIDLen, asm.R9, asm.Word),
		// JLT, not JEq: every verifier narrows R9 to 1..20 from it.
		asm.JLT.Imm(asm.R9, 1, "recall"),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R7),
		asm.Add.Imm(asm.R2, udpHeaderLen+7),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, fpClient+offClientSCID),
		asm.Mov.Reg(asm.R4, asm.R9),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "bad"),
		asm.LoadMapPtr(asm.R1, 0).WithReference(refInitials).WithSymbol("recall"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, fpClient),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "remember"),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.LoadMem(asm.R8, asm.R7, offInitialGen, asm.Word),
		asm.FnKtimeGetNs.Call(),
		asm.LoadMem(asm.R1, asm.R7, offInitialSeen, asm.DWord),
		asm.Mov.Reg(asm.R2, asm.R0),
		asm.Sub.Reg(asm.R2, asm.R1),
		asm.LoadImm(asm.R3, int64(initialTTL), asm.DWord),
		asm.JGT.Reg(asm.R2, asm.R3, "remember"),
		asm.StoreMem(asm.R7, offInitialSeen, asm.R0, asm.DWord),
		asm.Mov.Imm(asm.R9, offRemembered),
	}
	p = append(p, selectSlot(asm.R8, "remember")...)
	p = append(p, asm.Ja.Label("counted"))
	cfg := lookupConfig("pass")
	cfg[0] = cfg[0].WithSymbol("remember")
	p = append(p, cfg...)
	return append(p,
		asm.LoadMem(asm.R8, asm.R0, offQUICNewest, asm.Word),
		asm.Mov.Imm(asm.R9, offNewest),
		asm.StoreMem(asm.RFP, fpInitial+offInitialGen, asm.R8, asm.DWord), // and zeroes the padding
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.RFP, fpInitial+offInitialSeen, asm.R0, asm.DWord),
		asm.LoadMapPtr(asm.R1, 0).WithReference(refInitials),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, fpClient),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, fpInitial),
		asm.Mov.Imm(asm.R4, 0), // BPF_ANY
		asm.FnMapUpdateElem.Call(),
		asm.Ja.Label("to_newest"),
	)
}

// newest selects the newest generation's socket (R9 says which counter
// counts it), or jumps to none when it has none.
func newest(label, none string) asm.Instructions {
	p := lookupConfig(none)
	p[0] = p[0].WithSymbol(label)
	p = append(p, asm.LoadMem(asm.R8, asm.R0, offQUICNewest, asm.Word))
	sel := selectSlot(asm.R8, none)
	sel[0] = sel[0].WithSymbol("to_newest")
	return append(p, sel...)
}

// countAt adds one to the counter at offset R9 of the generation whose
// socket was selected (its index on the stack at fpSelect).
func countAt() asm.Instructions {
	return asm.Instructions{
		asm.LoadMapPtr(asm.R1, 0).WithReference(refQUICCounters).WithSymbol("counted"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, fpSelect),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.Add.Reg(asm.R0, asm.R9),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
	}
}
