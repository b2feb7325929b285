package codec_test

import (
	"bytes"
	"math"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/codec"
)

// anyInterval draws an interval of any uvarint length, the edges of each
// length likely.
var anyInterval = rapid.OneOf(
	rapid.Int64Range(1, 1<<20),
	rapid.Int64Min(1),
	rapid.SampledFrom([]int64{1, 127, 128, 1<<14 - 1, 1 << 14, 1<<49 - 1, 1 << 49, 1<<56 - 1, 1 << 56, math.MaxInt64}),
)

// TestGCRAFormatAppend: Append gives the bytes AppendGCRA gives, written
// into dst whatever it held before, in place when it is large enough.
func TestGCRAFormatAppend(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		interval := anyInterval.Draw(t, "interval")
		tat := anyTime.Draw(t, "tat")
		f := codec.NewGCRAFormat(interval)
		old := rapid.SliceOfN(rapid.Byte(), 0, 24).Draw(t, "dst")
		want := codec.AppendGCRA(nil, codec.GCRA{TAT: tat, Interval: interval})
		dst := append([]byte(nil), old...)
		got := f.Append(dst[:0], tat)
		if !bytes.Equal(got, want) {
			t.Fatalf("Append(%x, %d) in interval %d = %x, want %x", old, tat, interval, got, want)
		}
		if cap(dst) >= len(want) && &got[0] != &dst[:1][0] {
			t.Fatalf("Append into %d bytes of room was not written in place", cap(dst))
		}
		if back, ok := f.Read(got); interval < 1<<56 && (!ok || back != tat) {
			t.Fatalf("Read(Append(%d)) = %d, %v", tat, back, ok)
		}
		// Put rewrites the TAT of a record Read accepted, in place.
		if _, ok := f.Read(got); ok {
			later := anyTime.Draw(t, "later")
			f.Put(got, later)
			if want := codec.AppendGCRA(nil, codec.GCRA{TAT: later, Interval: interval}); !bytes.Equal(got, want) {
				t.Fatalf("Put(%d) = %x, want %x", later, got, want)
			}
		}
	})
}

// TestGCRAFormatRead: on any bytes, Read answers true only for a record
// DecodeGCRA reads as counted in the format's interval, with its TAT; and
// every such record whose interval takes at most 8 bytes is read.
func TestGCRAFormatRead(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		interval := anyInterval.Draw(t, "interval")
		f := codec.NewGCRAFormat(interval)
		var b []byte
		switch rapid.IntRange(0, 2).Draw(t, "kind") {
		case 0:
			b = rapid.SliceOfN(rapid.Byte(), 0, 20).Draw(t, "bytes")
		case 1: // a record of this interval with one byte changed, cut or added
			b = codec.AppendGCRA(nil, codec.GCRA{TAT: anyTime.Draw(t, "tat"), Interval: interval})
			switch i := rapid.IntRange(0, len(b)+1).Draw(t, "where"); {
			case i < len(b):
				b[i] ^= rapid.ByteRange(1, 255).Draw(t, "flip")
			case i == len(b):
				b = b[:len(b)-1]
			default:
				b = append(b, rapid.Byte().Draw(t, "extra"))
			}
		default: // a record of another interval, or of version 1
			b = codec.AppendGCRA(nil, codec.GCRA{TAT: anyTime.Draw(t, "tat"), Interval: rapid.Int64Range(0, 1<<40).Draw(t, "other")})
		}
		tat, ok := f.Read(b)
		s, err := codec.DecodeGCRA(b)
		switch {
		case ok && (err != nil || s.Interval != interval || s.TAT != tat):
			t.Fatalf("Read(%x) = %d, true; DecodeGCRA = %+v, %v", b, tat, s, err)
		case !ok && err == nil && s.Interval == interval && interval < 1<<56:
			t.Fatalf("Read(%x) = false for a record in its interval %d", b, interval)
		}
	})
}

func TestGCRAFormatZero(t *testing.T) {
	var f codec.GCRAFormat
	if _, ok := f.Read(codec.AppendGCRA(nil, codec.GCRA{TAT: 1, Interval: 1})); ok {
		t.Error("the zero GCRAFormat read a record")
	}
	if f := codec.NewGCRAFormat(0); func() bool { _, ok := f.Read([]byte{0x26, 0, 0, 0, 0, 0, 0, 0, 0, 0}); return ok }() {
		t.Error("NewGCRAFormat(0) read a record")
	}
}

// TestReadTokenBucket: on any bytes, the inline read answers true only for
// what DecodeTokenBucket decodes, with the same state, and for every whole
// version 2 record it decodes.
func TestReadTokenBucket(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOfN(rapid.Byte(), 0, 20).Draw(t, "bytes")
		if rapid.Bool().Draw(t, "a record") {
			b = codec.AppendTokenBucket(nil, codec.TokenBucket{Updated: anyTime.Draw(t, "updated"), Spent: rapid.Int64().Draw(t, "spent")})
		}
		s, ok := codec.ReadTokenBucket(b)
		w, err := codec.DecodeTokenBucket(b)
		if ok != (err == nil) || ok && s != w {
			t.Fatalf("ReadTokenBucket(%x) = %+v, %v; DecodeTokenBucket = %+v, %v", b, s, ok, w, err)
		}
	})
}
