package drain

import (
	"bytes"
	"fmt"
	"testing"
)

// TestFrameCursor: a stream of HTTP/2 frames cut at every byte, and in every
// two pieces, is followed frame by frame: each frame is seen once with its
// type, flags and first payload bytes, and the cursor is between frames
// exactly at their ends; frameEnd stops at the end of the frame in progress.
func TestFrameCursor(t *testing.T) {
	var stream []byte
	ends := map[int]bool{0: true}
	type frame struct {
		typ, flags byte
		payload    string
	}
	want := []frame{{4, 0, ""}, {6, 1, "12345678"}, {0, 1, "a body longer than eight bytes"}, {7, 0, "\x7f\xff\xff\xff\x00\x00\x00\x00"}}
	for _, f := range want {
		stream = appendFrame(stream, f.typ, f.flags, []byte(f.payload))
		ends[len(stream)] = true
	}
	for cut := 0; cut <= len(stream); cut++ {
		var c frameCursor
		var got []frame
		saw := func(typ, flags byte, p []byte) { got = append(got, frame{typ, flags, string(p)}) }
		for _, pc := range []struct {
			off int
			b   []byte
		}{{0, stream[:cut]}, {cut, stream[cut:]}} {
			off, piece := pc.off, pc.b
			if len(piece) == 0 {
				continue
			}
			if k := c.frameEnd(piece); k < len(piece) && !ends[off+k] {
				t.Fatalf("cut %d: frameEnd %d of the piece at %d is not a frame's end", cut, k, off)
			}
			c.advance(piece, saw)
		}
		if !c.between() || len(got) != len(want) {
			t.Fatalf("cut %d: between %v, saw %d frames, want %d", cut, c.between(), len(got), len(want))
		}
		for i, f := range want {
			if n := min(len(f.payload), 8); got[i] != (frame{f.typ, f.flags, f.payload[:n]}) {
				t.Errorf("cut %d: frame %d is %q, want %q", cut, i, fmt.Sprint(got[i]), fmt.Sprint(f))
			}
		}
	}
	var c frameCursor
	for i := range stream { // byte by byte
		c.advance(stream[i:i+1], nil)
		if c.between() != ends[i+1] {
			t.Fatalf("after byte %d: between %v, want %v", i, c.between(), ends[i+1])
		}
	}
	if !bytes.Equal(firstStep([8]byte{1, 2, 3, 4, 5, 6, 7, 8})[9:17], []byte{0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0}) {
		t.Error("the first step's GOAWAY does not name stream 2^31-1 with NO_ERROR")
	}
}
