package codec

import (
	"encoding/binary"
	"testing"

	"pgregory.net/rapid"
)

// TestDeltaTables: SplitLog's table-driven read of a delta (its length by
// the first byte, then one masked load of the 8 bytes that end it) gives
// what readDelta gives, for every first byte and any payload: the same
// length and value, and the same refusal of a first byte naming no length
// or of a delta not written at its shortest.
func TestDeltaTables(t *testing.T) {
	for n := 1; n <= 9; n++ {
		if deltaRead[n].min != minDelta[n] {
			t.Fatalf("length %d: smallest value %d in the table, %d in minDelta", n, deltaRead[n].min, minDelta[n])
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		c := rapid.Byte().Draw(t, "first")
		rest := rapid.SliceOfN(rapid.Byte(), 8, 8).Draw(t, "payload")
		b := append([]byte{c}, rest...)
		want, wn := readDelta(b)
		n := int(deltaLen[c])
		if n == 0 {
			if wn != -1 {
				t.Fatalf("first byte %#x: no length in the table, readDelta read %d bytes", c, wn)
			}
			return
		}
		// The record before the delta, as SplitLog sees it: 8 bytes of
		// anything, then the delta.
		rec := append(make([]byte, 8), b[:n]...)
		for i := range 8 {
			rec[i] = ^byte(i * 37)
		}
		d := binary.BigEndian.Uint64(rec[len(rec)-8:]) & deltaRead[n].mask
		switch {
		case d < deltaRead[n].min:
			if wn != -1 {
				t.Fatalf("%x: the table refuses %d as not shortest, readDelta reads %d in %d", b[:n], d, want, wn)
			}
		case wn != n || want != d:
			t.Fatalf("%x: the table reads %d in %d bytes, readDelta %d in %d", b[:n], d, n, want, wn)
		}
	})
}

// Every tag of the table can be checked and described: a row added
// without its describe would leave inspect blind to it.
func TestLayoutsAreWhole(t *testing.T) {
	for tag, l := range layouts {
		if l.name == "" {
			continue
		}
		if l.valid == nil || l.describe == nil || l.latest < Version {
			t.Errorf("tag %d (%s): valid %v, describe %v, latest %d", tag, l.name, l.valid != nil, l.describe != nil, l.latest)
		}
	}
}
