package codec_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/codec"
)

// anyTime draws a time anywhere in int64, with the edges and the epoch
// likely.
var anyTime = rapid.OneOf(
	rapid.Int64(),
	rapid.SampledFrom([]int64{0, -1, 1, math.MinInt64, math.MaxInt64, 1_700_000_000e9}),
)

func TestRoundTrip(t *testing.T) {
	t.Run("gcra", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			s := codec.GCRA{TAT: anyTime.Draw(t, "tat")}
			size := 9 // version 1: no interval
			if rapid.Bool().Draw(t, "version 2") {
				s.Interval = rapid.OneOf(rapid.Int64Range(1, 1<<20), rapid.Int64Min(1)).Draw(t, "interval")
				size = 10 + (63-bits.LeadingZeros64(uint64(s.Interval)))/7
			}
			b := codec.AppendGCRA(nil, s)
			if len(b) != size || codec.GCRASize != 9 {
				t.Fatalf("gcra record %+v is %d bytes, want %d", s, len(b), size)
			}
			got, err := codec.DecodeGCRA(b)
			if err != nil || got != s {
				t.Fatalf("DecodeGCRA(AppendGCRA(%+v)) = %+v, %v", s, got, err)
			}
		})
	})
	t.Run("bucket", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			tag := rapid.SampledFrom([]codec.Tag{codec.TagTokenBucket, codec.TagLeakyBucket}).Draw(t, "tag")
			s := codec.Bucket{Updated: anyTime.Draw(t, "updated"), Level: rapid.Int64Min(0).Draw(t, "level")}
			b := codec.AppendBucket(nil, tag, s)
			if len(b) != codec.BucketSize || codec.BucketSize != 17 {
				t.Fatalf("bucket record is %d bytes, want 17", len(b))
			}
			got, err := codec.DecodeBucket(b, tag)
			if err != nil || got != s {
				t.Fatalf("DecodeBucket(AppendBucket(%v, %+v)) = %+v, %v", tag, s, got, err)
			}
		})
	})
	t.Run("token bucket", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			s := codec.TokenBucket{Updated: anyTime.Draw(t, "updated"), Spent: rapid.Int64Min(0).Draw(t, "spent")}
			b := codec.AppendTokenBucket(nil, s)
			if len(b) != codec.BucketSize || b[0] != 0x21 {
				t.Fatalf("token bucket record %x: want 17 bytes under header 0x21", b)
			}
			got, err := codec.DecodeTokenBucket(b)
			if err != nil || got != s {
				t.Fatalf("DecodeTokenBucket(AppendTokenBucket(%+v)) = %+v, %v", s, got, err)
			}
		})
	})
	t.Run("window", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			s := codec.Window{Start: anyTime.Draw(t, "start"), Count: rapid.Int64Min(0).Draw(t, "count")}
			b := codec.AppendWindow(nil, s)
			if len(b) != codec.WindowSize || codec.WindowSize != 17 {
				t.Fatalf("window record is %d bytes, want 17", len(b))
			}
			got, err := codec.DecodeWindow(b)
			if err != nil || got != s {
				t.Fatalf("DecodeWindow(AppendWindow(%+v)) = %+v, %v", s, got, err)
			}
		})
	})
	t.Run("counter", func(t *testing.T) {
		rapid.Check(t, func(t *rapid.T) {
			s := codec.Counter{
				Start:    anyTime.Draw(t, "start"),
				Count:    rapid.Int64Min(0).Draw(t, "count"),
				Previous: rapid.Int64Min(0).Draw(t, "previous"),
			}
			b := codec.AppendCounter(nil, s)
			if len(b) != codec.CounterSize || codec.CounterSize != 25 {
				t.Fatalf("counter record is %d bytes, want 25", len(b))
			}
			got, err := codec.DecodeCounter(b)
			if err != nil || got != s {
				t.Fatalf("DecodeCounter(AppendCounter(%+v)) = %+v, %v", s, got, err)
			}
		})
	})
	t.Run("log", func(t *testing.T) {
		// Entry times round trip exactly, to the nanosecond, and the
		// record is the one encoding of them.
		rapid.Check(t, func(t *rapid.T) {
			first := rapid.Int64Range(-1e18, 1e18).Draw(t, "first")
			times := []int64{first}
			w := codec.NewLogWriter(nil, first)
			for _, dt := range rapid.SliceOf(drawDelta).Draw(t, "dts") {
				next := times[len(times)-1] + min(dt, 1e16)
				times = append(times, next)
				w.Add(next)
			}
			rec := append([]byte(nil), w.Bytes()...)
			l, err := codec.DecodeLog(rec)
			if err != nil {
				t.Fatalf("DecodeLog: %v", err)
			}
			if got := entries(l); !equal(got, times) || l.Len != len(times) || l.Newest != times[len(times)-1] || l.Version != 2 {
				t.Fatalf("decoded %+v entries %v, want %v", l, got, times)
			}
			again := codec.NewLogWriter(nil, l.Oldest)
			it := l.Iter()
			it.Next()
			for v, ok := it.Next(); ok; v, ok = it.Next() {
				again.Add(v)
			}
			if !bytes.Equal(again.Bytes(), rec) {
				t.Fatalf("rewriting the entries gives %x, want %x", again.Bytes(), rec)
			}
		})
	})
}

// drawDelta draws a gap between log entries: often none, and every
// encoded length, edges included, likely.
var drawDelta = rapid.OneOf(
	rapid.Just(int64(0)),
	rapid.Int64Range(0, 1<<28),
	rapid.Int64Range(0, 1<<42),
	rapid.SampledFrom([]int64{1, 63, 64, 1<<13 - 1, 1 << 13, 1<<20 - 1, 1 << 20, 1<<27 - 1, 1 << 27, 1<<39 - 1, 1 << 39, 1<<40 - 1, 1 << 40, 1<<48 - 1, 1 << 48, 1<<56 - 1, 1 << 56}),
)

// entries walks a decoded log.
func entries(l codec.Log) []int64 {
	var out []int64
	it := l.Iter()
	for v, ok := it.Next(); ok; v, ok = it.Next() {
		out = append(out, v)
	}
	return out
}

// logV1 builds a version 1 sliding log by hand: the oldest entry, the
// shift, and uvarint deltas in units of 1<<shift ns.
func logV1(oldest int64, shift uint8, deltas ...uint64) []byte {
	b := []byte{0x14, 0, 0, 0, 0, 0, 0, 0, 0, shift}
	binary.BigEndian.PutUint64(b[1:], uint64(oldest))
	for _, d := range deltas {
		b = binary.AppendUvarint(b, d)
	}
	return b
}

// TestAppendInPlace: an Append writes into dst's backing array when it is
// large enough, which is what lets a step rewrite a record without
// allocating.
func TestAppendInPlace(t *testing.T) {
	buf := make([]byte, 0, 32)
	lw := codec.NewLogWriter(buf, 1)
	for _, b := range [][]byte{
		codec.AppendGCRA(buf, codec.GCRA{TAT: 1}),
		codec.AppendGCRA(buf, codec.GCRA{TAT: 1, Interval: 1e8}),
		codec.AppendTokenBucket(buf, codec.TokenBucket{Updated: 1, Spent: 2}),
		codec.AppendBucket(buf, codec.TagTokenBucket, codec.Bucket{Updated: 1, Level: 2}),
		codec.AppendWindow(buf, codec.Window{Start: 1, Count: 2}),
		codec.AppendCounter(buf, codec.Counter{Start: 1, Count: 2, Previous: 3}),
		lw.Bytes(),
	} {
		if &b[0] != &buf[:1][0] {
			t.Errorf("record %x was not written in place", b)
		}
	}
	// Too small: a new array, and the old one untouched.
	small := []byte{0xaa}
	if b := codec.AppendGCRA(small[:0], codec.GCRA{TAT: 1}); len(b) != codec.GCRASize || small[0] != 0xaa {
		t.Errorf("AppendGCRA into a 1-byte array: %x, array now %x", b, small)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		codec.AppendCounter(buf, codec.Counter{Start: 1, Count: 2, Previous: 3})
	}); allocs != 0 {
		t.Errorf("AppendCounter into a large enough buffer: %v allocations", allocs)
	}
}

// TestDeltaLengths: each gap between entries takes the shortest of the nine
// lengths that holds it, decodes back exactly at both edges of every length,
// and a longer encoding of the same gap, or a first byte naming no length,
// does not decode.
func TestDeltaLengths(t *testing.T) {
	for _, c := range []struct {
		d    uint64
		size int
	}{
		{0, 1}, {63, 1}, {64, 2}, {1<<13 - 1, 2}, {1 << 13, 3}, {1<<20 - 1, 3}, {1 << 20, 4}, {1<<27 - 1, 4},
		{1 << 27, 5}, {1<<39 - 1, 5}, {1 << 39, 6}, {1<<40 - 1, 6}, {1 << 40, 7}, {1<<48 - 1, 7},
		{1 << 48, 8}, {1<<56 - 1, 8}, {1 << 56, 9}, {1<<63 - 1, 9},
	} {
		if got := codec.DeltaSize(c.d); got != c.size {
			t.Errorf("DeltaSize(%d) = %d, want %d", c.d, got, c.size)
		}
		w := codec.NewLogWriter(nil, math.MinInt64)
		w.Add(math.MinInt64 + int64(c.d))
		rec := w.Bytes()
		if len(rec) != codec.LogHeaderSize+c.size {
			t.Errorf("a gap of %d: record of %d bytes, want %d", c.d, len(rec), codec.LogHeaderSize+c.size)
		}
		l, err := codec.DecodeLog(rec)
		if err != nil || l.Newest != math.MinInt64+int64(c.d) || l.Len != 2 {
			t.Errorf("a gap of %d: decoded %+v, %v", c.d, l, err)
		}
	}
	hw := codec.NewLogWriter(nil, 0)
	head := hw.Bytes()
	for _, enc := range [][]byte{
		{0xc0, 0x3f},                      // 63 in two bytes
		{0x00, 0, 0, 0, 0},                // 0 in five
		{0x00, 0, 0x0f, 0xff, 0xff},       // 2^20-1 in five
		{0xf8, 0, 0, 0, 0, 0},             // 0 in six
		{0xfb, 0, 0, 0, 0, 0, 0, 0, 1},    // 1 in nine
		{0xfc, 0, 0, 0, 0, 0, 0, 0, 0, 0}, // no such length
		{0xff},
	} {
		rec := append(append([]byte(nil), head...), enc...)
		if _, err := codec.DecodeLog(rec); !errors.Is(err, codec.ErrInvalid) {
			t.Errorf("delta %x: %v, want ErrInvalid", enc, err)
		}
	}
	for _, enc := range [][]byte{{0x00, 0, 0, 0}, {0xc1}, {0xe0, 1}, {0xf0, 1, 2}, {0xf8, 1, 2, 3, 4}, {0xfb, 1}} {
		rec := append(append([]byte(nil), head...), enc...)
		if _, err := codec.DecodeLog(rec); !errors.Is(err, codec.ErrTruncated) {
			t.Errorf("delta %x cut short: %v, want ErrTruncated", enc, err)
		}
	}
}

// TestLogBudget: a sliding log whose entries lie within one window of up to
// an hour costs at most 10 bytes plus 5 per entry, however they are spread:
// only a gap of 2^39 ns (over nine minutes) or more takes 6 bytes or 7, and
// an hour holds few of them. Longer windows cost more, as the README says.
func TestLogBudget(t *testing.T) {
	budget := func(n int) int { return 10 + 5*n } // within the 12 + 5 per entry asked of it
	for _, w := range []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, 7 * time.Second, time.Minute, 15 * time.Minute, time.Hour} {
		// Every entry count up to 400, spread evenly across the window:
		// the widest gaps a live log of that many entries can have.
		for n := 1; n <= 400; n++ {
			lw := codec.NewLogWriter(nil, 1_700_000_000e9)
			for i := 1; i < n; i++ {
				lw.Add(1_700_000_000e9 + int64(w-1)*int64(i)/int64(n-1))
			}
			if got := len(lw.Bytes()); got > budget(n) {
				t.Fatalf("window %v: %d entries spread evenly take %d bytes, budget %d", w, n, got, budget(n))
			}
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		w := rapid.Int64Range(int64(time.Millisecond), int64(time.Hour)).Draw(t, "window")
		first := rapid.Int64Range(-1e18, 1e18).Draw(t, "first")
		lw := codec.NewLogWriter(nil, first)
		n := 1
		offsets := rapid.SliceOf(rapid.OneOf(rapid.Int64Range(0, w-1), rapid.Just(w-1))).Draw(t, "offsets")
		slices.Sort(offsets)
		for _, off := range offsets {
			lw.Add(first + off) // within one window of the first, in order
			n++
		}
		if got := len(lw.Bytes()); got > budget(n) {
			t.Fatalf("window %d: %d entries take %d bytes, budget %d", w, n, got, budget(n))
		}
	})
	// What a day costs: a gap of over 2^40 ns (18 minutes) takes 7 bytes.
	lw := codec.NewLogWriter(nil, 0)
	for i := int64(1); i <= 4; i++ {
		lw.Add(i * int64(6*time.Hour-1))
	}
	if got := len(lw.Bytes()); got != codec.LogHeaderSize+4*7 {
		t.Errorf("5 entries 6 h apart: %d bytes, want %d", got, codec.LogHeaderSize+4*7)
	}
}

// TestLogExact: entries are kept to the nanosecond; one earlier than the
// last is kept at the last one's time (entries never go backwards); an
// entry at the same instant costs one byte.
func TestLogExact(t *testing.T) {
	w := codec.NewLogWriter(nil, 1000)
	for _, c := range []struct{ add, want int64 }{
		{1000, 1000}, {1001, 1001}, {1001, 1001}, {1000, 1001}, {2025, 2025}, {1000 + 512*1000 + 1, 1000 + 512*1000 + 1},
	} {
		before, last := len(w.Bytes()), w.Last()
		w.Add(c.add)
		if got := w.Last(); got != c.want {
			t.Errorf("Add(%d): stored at %d, want %d", c.add, got, c.want)
		}
		if c.want == last && len(w.Bytes()) != before+1 {
			t.Errorf("Add(%d) at the last entry's time took %d bytes", c.add, len(w.Bytes())-before)
		}
	}
	l, err := codec.DecodeLog(w.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{1000, 1000, 1001, 1001, 1001, 2025, 1000 + 512*1000 + 1}
	if got := entries(l); !equal(got, want) || l.Len != len(want) || l.Newest != want[len(want)-1] || l.Shift != 0 {
		t.Errorf("decoded %+v entries %v, want %v", l, got, want)
	}
}

// TestSplitLog: SplitLog counts the entries after a horizon and finds the
// oldest of them in the same pass that validates the record; the live
// entries' encoded tail, appended after a new header in the same array, is
// the log without the aged-out ones, which is how a step drops them.
func TestSplitLog(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		first := rapid.Int64Range(-1e15, 1e15).Draw(t, "first")
		lw := codec.NewLogWriter(nil, first)
		all := []int64{first}
		for _, dt := range rapid.SliceOfN(drawDelta, 0, 40).Draw(t, "dts") {
			next := all[len(all)-1] + min(dt, 1e12)
			all = append(all, next)
			lw.Add(next)
		}
		rec := append([]byte(nil), lw.Bytes()...)
		horizon := rapid.OneOf(rapid.SampledFrom(all), rapid.Int64Range(first-10, all[len(all)-1]+10)).Draw(t, "horizon") +
			rapid.Int64Range(-1, 1).Draw(t, "give or take")
		s, err := codec.SplitLog(rec, horizon)
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for k < len(all) && all[k] <= horizon {
			k++
		}
		if s.Len != len(all) || s.Live != len(all)-k || s.Newest != all[len(all)-1] {
			t.Fatalf("SplitLog(%v, %d) = %+v", all, horizon, s)
		}
		if s.Live == 0 {
			return
		}
		if s.First != all[k] {
			t.Fatalf("SplitLog(%v, %d): First %d, want %d", all, horizon, s.First, all[k])
		}
		var live []int64
		it := s.Iter()
		for v, ok := it.Next(); ok; v, ok = it.Next() {
			live = append(live, v)
		}
		if !equal(live, all[k:]) {
			t.Fatalf("live entries %v, want %v", live, all[k:])
		}
		w := codec.NewLogWriter(rec, s.First)
		w.AddRaw(s.Rest, s.Newest)
		l, err := codec.DecodeLog(w.Bytes())
		if err != nil || !equal(entries(l), all[k:]) || w.Last() != s.Newest {
			t.Fatalf("after dropping %d: %v, %v; want %v", k, entries(l), err, all[k:])
		}
	})
	// A version 1 record does not split: it is migrated first.
	if _, err := codec.SplitLog(logV1(5, 9, 1, 2), 0); !errors.Is(err, codec.ErrVersion) {
		t.Errorf("SplitLog(version 1) = %v, want ErrVersion", err)
	}
}

// TestMigrateLog: a version 1 log still decodes, at the times it stored
// (rounded up to its resolution), and MigrateLog rewrites it as version 2
// with exactly those times.
func TestMigrateLog(t *testing.T) {
	for _, c := range []struct {
		rec  []byte
		want []int64
	}{
		{logV1(1000, 0, 0, 7, 1<<21-1), []int64{1000, 1000, 1007, 1007 + 1<<21 - 1}},
		{logV1(-5e9, 9, 1, 0, 1000), []int64{-5e9, -5e9 + 512, -5e9 + 512, -5e9 + 512 + 512000}},
		{logV1(math.MaxInt64-1024, 9, 2), []int64{math.MaxInt64 - 1024, math.MaxInt64}},
		{logV1(7, 30), []int64{7}},
	} {
		l, err := codec.DecodeLog(c.rec)
		if err != nil || l.Version != 1 || !equal(entries(l), c.want) {
			t.Errorf("DecodeLog(%x) = %+v %v, %v; want entries %v", c.rec, l, entries(l), err, c.want)
			continue
		}
		if !codec.Valid(c.rec) {
			t.Errorf("Valid(%x) = false for a version 1 log", c.rec)
		}
		m, err := codec.MigrateLog(c.rec)
		if err != nil {
			t.Errorf("MigrateLog(%x): %v", c.rec, err)
			continue
		}
		l2, err := codec.DecodeLog(m)
		if err != nil || l2.Version != 2 || !equal(entries(l2), c.want) {
			t.Errorf("MigrateLog(%x) = %x: %+v %v, %v; want entries %v", c.rec, m, l2, entries(l2), err, c.want)
		}
	}
	v2w := codec.NewLogWriter(nil, 5)
	v2 := v2w.Bytes()
	for _, rec := range [][]byte{nil, v2, logV1(5, 63), append(logV1(5, 9), 0x80)} {
		if _, err := codec.MigrateLog(rec); err == nil {
			t.Errorf("MigrateLog(%x): no error", rec)
		}
	}
}

// TestLogExtremes: times before 1970 decode (a regression: the overflow
// check once compared against MaxInt64-t, which wraps for negative t), and a
// delta past the end of int64 time does not decode.
func TestLogExtremes(t *testing.T) {
	for _, first := range []int64{-1, -2, -5e9, -1e18, math.MinInt64, math.MinInt64 + 1} {
		w := codec.NewLogWriter(nil, first)
		w.Add(first + 1e8)
		w.Add(first + 2e8)
		l, err := codec.DecodeLog(w.Bytes())
		if err != nil {
			t.Errorf("log from %d: %v", first, err)
			continue
		}
		if l.Len != 3 || l.Newest != first+2e8 {
			t.Errorf("log from %d: Len %d Newest %d", first, l.Len, l.Newest)
		}
	}
	for _, c := range []struct{ first, add int64 }{
		{math.MaxInt64 - 1000, math.MaxInt64},
		{math.MinInt64, math.MaxInt64},
		{-1, math.MaxInt64},
	} {
		w := codec.NewLogWriter(nil, c.first)
		w.Add(c.add)
		l, err := codec.DecodeLog(w.Bytes())
		if err != nil || l.Newest != c.add || w.Last() != c.add {
			t.Errorf("Add(%d) after %d: %+v, %v", c.add, c.first, l, err)
		}
	}
	// A delta that would pass the end of int64 time does not decode.
	end := codec.NewLogWriter(nil, math.MaxInt64-10)
	rec := append(end.Bytes(), 0x80|11)
	if _, err := codec.DecodeLog(rec); !errors.Is(err, codec.ErrInvalid) {
		t.Errorf("entry past MaxInt64: %v, want ErrInvalid", err)
	}
	if _, err := codec.DecodeLog(logV1(math.MaxInt64-10, 0, 11)); !errors.Is(err, codec.ErrInvalid) {
		t.Errorf("version 1 entry past MaxInt64: %v, want ErrInvalid", err)
	}
}

// TestDecodeErrors: each way a record can be wrong has its own error.
func TestDecodeErrors(t *testing.T) {
	gcra := codec.AppendGCRA(nil, codec.GCRA{TAT: 5})
	bucket := codec.AppendBucket(nil, codec.TagTokenBucket, codec.Bucket{Updated: 1, Level: 2})
	window := codec.AppendWindow(nil, codec.Window{Start: 1, Count: 2})
	counter := codec.AppendCounter(nil, codec.Counter{Start: 1, Count: 2, Previous: 3})
	lw := codec.NewLogWriter(nil, 1)
	log := lw.Bytes()
	token := codec.AppendTokenBucket(nil, codec.TokenBucket{Updated: 1, Spent: 2})
	gcra2 := codec.AppendGCRA(nil, codec.GCRA{TAT: 5, Interval: 300})
	withHeader := func(b []byte, h byte) []byte { b = append([]byte(nil), b...); b[0] = h; return b }
	decoders := map[string]func([]byte) error{
		"gcra":    func(b []byte) error { _, err := codec.DecodeGCRA(b); return err },
		"token":   func(b []byte) error { _, err := codec.DecodeBucket(b, codec.TagTokenBucket); return err },
		"token2":  func(b []byte) error { _, err := codec.DecodeTokenBucket(b); return err },
		"leaky":   func(b []byte) error { _, err := codec.DecodeBucket(b, codec.TagLeakyBucket); return err },
		"window":  func(b []byte) error { _, err := codec.DecodeWindow(b); return err },
		"counter": func(b []byte) error { _, err := codec.DecodeCounter(b); return err },
		"log":     func(b []byte) error { _, err := codec.DecodeLog(b); return err },
	}
	for _, c := range []struct {
		name    string
		decoder string
		rec     []byte
		want    error
	}{
		{"nil", "gcra", nil, codec.ErrTruncated},
		{"empty", "log", []byte{}, codec.ErrTruncated},
		{"short", "gcra", gcra[:8], codec.ErrTruncated},
		{"short", "counter", counter[:24], codec.ErrTruncated},
		{"short", "log", log[:8], codec.ErrTruncated},
		{"short", "log", logV1(1, 9)[:9], codec.ErrTruncated},
		{"short", "gcra", gcra2[:9], codec.ErrTruncated},
		{"short", "gcra", gcra2[:10], codec.ErrTruncated},
		{"short", "token2", token[:16], codec.ErrTruncated},
		{"trailing", "gcra", append(append([]byte(nil), gcra2...), 0), codec.ErrTrailing},
		{"trailing", "token2", append(append([]byte(nil), token...), 0), codec.ErrTrailing},
		{"interval 0", "gcra", []byte{0x26, 0, 0, 0, 0, 0, 0, 0, 5, 0}, codec.ErrInvalid},
		{"interval overlong", "gcra", []byte{0x26, 0, 0, 0, 0, 0, 0, 0, 5, 0x81, 0}, codec.ErrInvalid},
		{"interval past int64", "gcra", append([]byte{0x26, 0, 0, 0, 0, 0, 0, 0, 5}, binary.AppendUvarint(nil, 1<<63)...), codec.ErrInvalid},
		{"version 1", "token2", bucket, codec.ErrVersion},
		{"version 3", "token2", withHeader(token, 0x31), codec.ErrVersion},
		{"version 3", "gcra", withHeader(gcra2, 0x36), codec.ErrVersion},
		{"version 3", "log", withHeader(log, 0x34), codec.ErrVersion},
		{"negative spent", "token2", codec.AppendTokenBucket(nil, codec.TokenBucket{Spent: -1}), codec.ErrInvalid},
		{"trailing", "gcra", append(append([]byte(nil), gcra...), 0), codec.ErrTrailing},
		{"trailing", "window", append(append([]byte(nil), window...), 0), codec.ErrTrailing},
		{"version 0", "gcra", withHeader(gcra, 0x06), codec.ErrVersion},
		{"version 2", "token", withHeader(bucket, 0x21), codec.ErrVersion},
		{"version 15", "log", withHeader(log, 0xf4), codec.ErrVersion},
		{"leaky read as token", "token", withHeader(bucket, 0x12), codec.ErrTag},
		{"token read as leaky", "leaky", bucket, codec.ErrTag},
		{"window read as gcra", "gcra", window[:9], codec.ErrTag},
		{"counter read as log", "log", counter, codec.ErrTag},
		{"gcra read as window", "window", append(append([]byte(nil), gcra...), make([]byte, 8)...), codec.ErrTag},
		{"negative level", "token", codec.AppendBucket(nil, codec.TagTokenBucket, codec.Bucket{Level: -1}), codec.ErrInvalid},
		{"negative count", "window", codec.AppendWindow(nil, codec.Window{Count: -1}), codec.ErrInvalid},
		{"negative previous", "counter", codec.AppendCounter(nil, codec.Counter{Previous: math.MinInt64}), codec.ErrInvalid},
		{"shift 63", "log", logV1(1, 63), codec.ErrInvalid},
		{"unterminated delta", "log", append(logV1(1, 9), 0x80), codec.ErrTruncated},
		{"unterminated delta", "log", append(append([]byte(nil), log...), 0xc0), codec.ErrTruncated},
		{"overlong delta", "log", append(append([]byte(nil), log...), 0xc0, 1), codec.ErrInvalid},
	} {
		err := decoders[c.decoder](c.rec)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %s decoder = %v, want %v", c.name, c.decoder, err, c.want)
		}
	}

	v, tag, err := codec.Header(counter)
	if v != codec.Version || tag != codec.TagSlidingCounter || err != nil {
		t.Errorf("Header(counter) = %d, %v, %v", v, tag, err)
	}
	if _, _, err := codec.Header(nil); !errors.Is(err, codec.ErrTruncated) {
		t.Errorf("Header(nil) = %v, want ErrTruncated", err)
	}
	names := map[codec.Tag]string{
		codec.TagTokenBucket: "token_bucket", codec.TagLeakyBucket: "leaky_bucket", codec.TagFixedWindow: "fixed_window",
		codec.TagSlidingLog: "sliding_log", codec.TagSlidingCounter: "sliding_counter", codec.TagGCRA: "gcra", 0: "tag(0)", 15: "tag(15)",
	}
	for tag, want := range names {
		if got := tag.String(); got != want {
			t.Errorf("Tag(%d).String() = %q, want %q", uint8(tag), got, want)
		}
	}
}

// TestDecodeArbitrary: any bytes either fail to decode or decode to a valid
// state, which then round-trips; nothing panics. Inputs are mostly valid
// headers followed by anything, so the fields are reached.
func TestDecodeArbitrary(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var b []byte
		if rapid.IntRange(0, 3).Draw(t, "raw?") == 0 {
			b = rapid.SliceOf(rapid.Byte()).Draw(t, "bytes")
		} else {
			// A header of the current version and any tag, then a body of
			// one of the layouts' lengths, give or take a byte.
			tag := rapid.IntRange(0, 7).Draw(t, "tag")
			version := rapid.IntRange(1, max(1, codec.Latest(codec.Tag(tag)))).Draw(t, "version")
			b = []byte{byte(version<<4 | tag)}
			n := rapid.SampledFrom([]int{8, 9, 10, 16, 17, 24, 25}).Draw(t, "body") + rapid.IntRange(-1, 1).Draw(t, "give or take")
			b = append(b, rapid.SliceOfN(rapid.Byte(), max(n, 0), max(n, 0)).Draw(t, "body bytes")...)
			switch {
			case b[0] == 0x14 && len(b) >= 10:
				b = append(b[:10], rapid.SliceOf(rapid.Byte()).Draw(t, "deltas")...)
				b[9] %= 64 // a plausible shift, and deltas after it
			case b[0] == 0x24 && len(b) >= codec.LogHeaderSize:
				// Valid deltas mostly, then anything.
				for _, d := range rapid.SliceOf(rapid.Uint64Range(0, 1<<41)).Draw(t, "gaps") {
					w := codec.NewLogWriter(nil, 0)
					w.Add(int64(d))
					b = append(b, w.Bytes()[codec.LogHeaderSize:]...)
				}
				b = append(b, rapid.SliceOfN(rapid.Byte(), 0, 3).Draw(t, "tail")...)
			case b[0] == 0x26 && len(b) >= 9:
				b = binary.AppendUvarint(b[:9], rapid.Uint64().Draw(t, "interval"))
			}
		}
		checkDecodeAll(t, b)
	})
}

// checkDecodeAll runs every decoder over b and checks what decodes.
func checkDecodeAll(t interface {
	Helper()
	Fatalf(string, ...any)
}, b []byte) {
	t.Helper()
	orig := append([]byte(nil), b...)
	defer func() {
		if !bytes.Equal(b, orig) {
			t.Fatalf("a decoder changed its input")
		}
	}()
	if s, err := codec.DecodeGCRA(b); err == nil {
		if !bytes.Equal(codec.AppendGCRA(nil, s), b) {
			t.Fatalf("DecodeGCRA(%x) = %+v, which encodes differently", b, s)
		}
	}
	for _, tag := range []codec.Tag{codec.TagTokenBucket, codec.TagLeakyBucket} {
		if s, err := codec.DecodeBucket(b, tag); err == nil {
			if s.Level < 0 || !bytes.Equal(codec.AppendBucket(nil, tag, s), b) {
				t.Fatalf("DecodeBucket(%x) = %+v: invalid or encodes differently", b, s)
			}
		}
	}
	if s, err := codec.DecodeWindow(b); err == nil {
		if s.Count < 0 || !bytes.Equal(codec.AppendWindow(nil, s), b) {
			t.Fatalf("DecodeWindow(%x) = %+v: invalid or encodes differently", b, s)
		}
	}
	if s, err := codec.DecodeCounter(b); err == nil {
		if s.Count < 0 || s.Previous < 0 || !bytes.Equal(codec.AppendCounter(nil, s), b) {
			t.Fatalf("DecodeCounter(%x) = %+v: invalid or encodes differently", b, s)
		}
	}
	if s, err := codec.DecodeTokenBucket(b); err == nil {
		if s.Spent < 0 || !bytes.Equal(codec.AppendTokenBucket(nil, s), b) {
			t.Fatalf("DecodeTokenBucket(%x) = %+v: invalid or encodes differently", b, s)
		}
	}
	if l, err := codec.DecodeLog(b); err == nil {
		// Valid: entries in order, as many as Len, ending at Newest. A
		// version 2 log written back is the same bytes; a version 1 log
		// (a uvarint may be written in more bytes than needed) migrates to
		// the same entries.
		it := l.Iter()
		first, ok := it.Next()
		if !ok || first != l.Oldest {
			t.Fatalf("DecodeLog(%x): first entry %d, %v; Oldest %d", b, first, ok, l.Oldest)
		}
		n, prev := 1, first
		w := codec.NewLogWriter(nil, first)
		for v, ok := it.Next(); ok; v, ok = it.Next() {
			if v < prev {
				t.Fatalf("DecodeLog(%x): entry %d at %d before %d", b, n, v, prev)
			}
			w.Add(v)
			n, prev = n+1, v
		}
		if n != l.Len || prev != l.Newest || l.Shift > 62 || (l.Version == 2) != (b[0] == 0x24) {
			t.Fatalf("DecodeLog(%x) = %+v, but %d entries ending at %d", b, l, n, prev)
		}
		if l.Version == 2 && !bytes.Equal(w.Bytes(), b) {
			t.Fatalf("DecodeLog(%x) = %+v, which encodes as %x", b, l, w.Bytes())
		}
		if l.Version == 1 {
			m, err := codec.MigrateLog(b)
			if err != nil || !bytes.Equal(m, w.Bytes()) {
				t.Fatalf("MigrateLog(%x) = %x, %v; want %x", b, m, err, w.Bytes())
			}
		}
		if s, err := codec.SplitLog(w.Bytes(), l.Oldest); err != nil || s.Len != l.Len || s.Newest != l.Newest {
			t.Fatalf("SplitLog(%x) = %+v, %v; the log is %+v", w.Bytes(), s, err, l)
		}
	}
	if codec.Valid(b) {
		_, tag, _ := codec.Header(b)
		if tag.String() == fmt.Sprintf("tag(%d)", uint8(tag)) {
			t.Fatalf("Valid(%x) for an unknown tag", b)
		}
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzDecode runs every decoder on arbitrary bytes: none panics, and what
// decodes is a valid state that encodes back (see checkDecodeAll). The seed
// corpus in testdata/fuzz/FuzzDecode holds a valid record of every layout and
// near misses of each.
func FuzzDecode(f *testing.F) {
	f.Add(codec.AppendGCRA(nil, codec.GCRA{TAT: 1_700_000_000e9}))
	f.Add(codec.AppendBucket(nil, codec.TagLeakyBucket, codec.Bucket{Updated: 1, Level: 5e9}))
	f.Add(codec.AppendCounter(nil, codec.Counter{Start: -7e9, Count: 3, Previous: 4}))
	f.Add(codec.AppendGCRA(nil, codec.GCRA{TAT: 1_700_000_000e9, Interval: 1e8}))
	f.Add(codec.AppendTokenBucket(nil, codec.TokenBucket{Updated: 1_700_000_000e9, Spent: 3e9}))
	f.Add(logV1(-5e9, 9, 1, 0, 2000))
	lw := codec.NewLogWriter(nil, -5e9)
	lw.Add(-5e9 + 1)
	lw.Add(-4e9)
	f.Add(lw.Bytes())
	f.Add(codec.AppendLogTable(nil, []int64{-5e9, -5e9 + 1, -4e9}))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecodeAll(t, b)
	})
}

func TestValid(t *testing.T) {
	good := map[string][]byte{
		"token bucket": codec.AppendBucket(nil, codec.TagTokenBucket, codec.Bucket{Updated: 5, Level: 7}),
		"leaky bucket": codec.AppendBucket(nil, codec.TagLeakyBucket, codec.Bucket{Updated: 5, Level: 7}),
		"fixed window": codec.AppendWindow(nil, codec.Window{Start: 5, Count: 2}),
		"counter":      codec.AppendCounter(nil, codec.Counter{Start: 5, Count: 1, Previous: 2}),
		"gcra":         codec.AppendGCRA(nil, codec.GCRA{TAT: 9}),
		"gcra 2":       codec.AppendGCRA(nil, codec.GCRA{TAT: 9, Interval: 1e8}),
		"gcra 2 short": codec.AppendGCRA(nil, codec.GCRA{TAT: 9, Interval: 3}),
		"token 2":      codec.AppendTokenBucket(nil, codec.TokenBucket{Updated: 5, Spent: 7}),
		"log 1":        logV1(100, 9, 0),
	}
	w := codec.NewLogWriter(nil, 100)
	w.Add(100)
	good["log"] = w.Bytes()
	for name, rec := range good {
		if !codec.Valid(rec) {
			t.Errorf("codec.Valid(%s %x) = false", name, rec)
		}
		if len(rec) > 1 && name != "log" && name != "log 1" && codec.Valid(rec[:len(rec)-1]) {
			t.Errorf("codec.Valid(%s cut short %x) = true", name, rec[:len(rec)-1])
		}
	}
	for _, rec := range [][]byte{nil, {}, {0x1f}, {0x21, 0, 0, 0, 0, 0, 0, 0, 0}, {0x31, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, []byte("token_bucket")} {
		if codec.Valid(rec) {
			t.Errorf("codec.Valid(%x) = true", rec)
		}
	}
}
