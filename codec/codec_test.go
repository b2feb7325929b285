package codec_test

import (
	"bytes"
	"errors"
	"math"
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
			b := codec.AppendGCRA(nil, s)
			if len(b) != codec.GCRASize || codec.GCRASize != 9 {
				t.Fatalf("gcra record is %d bytes, want 9", len(b))
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
		// Stored times round trip exactly: writing back what the iterator
		// read gives the same bytes.
		rapid.Check(t, func(t *rapid.T) {
			shift := rapid.Uint8Range(0, 40).Draw(t, "shift")
			first := rapid.Int64Range(-1e18, 1e18).Draw(t, "first")
			w := codec.NewLogWriter(nil, first, shift)
			for _, dt := range rapid.SliceOf(rapid.Int64Range(0, 1<<uint(min(shift+22, 50)))).Draw(t, "dts") {
				w.Add(w.Last() + dt)
			}
			rec := append([]byte(nil), w.Bytes()...)
			l, err := codec.DecodeLog(rec)
			if err != nil {
				t.Fatalf("DecodeLog: %v", err)
			}
			it := l.Iter()
			t0, _ := it.Next()
			again := codec.NewLogWriter(nil, t0, l.Shift)
			for v, ok := it.Next(); ok; v, ok = it.Next() {
				again.Add(v)
			}
			if !bytes.Equal(again.Bytes(), rec) {
				t.Fatalf("rewriting the stored times gives %x, want %x", again.Bytes(), rec)
			}
		})
	})
}

// TestAppendInPlace: an Append writes into dst's backing array when it is
// large enough, which is what lets a step rewrite a record without
// allocating.
func TestAppendInPlace(t *testing.T) {
	buf := make([]byte, 0, 32)
	lw := codec.NewLogWriter(buf, 1, 0)
	for _, b := range [][]byte{
		codec.AppendGCRA(buf, codec.GCRA{TAT: 1}),
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

// TestLogShift: the shift is the smallest at which a whole window, rounded
// up to the resolution, is a delta of at most 21 bits (a three-byte uvarint).
func TestLogShift(t *testing.T) {
	const max21 = 1<<21 - 1
	check := func(w int64) {
		t.Helper()
		s := codec.LogShift(w)
		unit := int64(1) << s
		if steps := (w + unit - 1) / unit; steps > max21 {
			t.Errorf("LogShift(%d) = %d: a window is %d steps, more than 21 bits", w, s, steps)
		}
		if s > 0 {
			if half := int64(1) << (s - 1); (w+half-1)/half <= max21 {
				t.Errorf("LogShift(%d) = %d: %d would do", w, s, s-1)
			}
		}
	}
	for _, w := range []int64{1, 2, max21 - 1, max21, max21 + 1, 2 * max21, 2*max21 + 1, 1e6, 1e9, 7e9, 60e9, 3600e9, 86400e9, 10 * 365 * 86400e9} {
		check(w)
	}
	rapid.Check(t, func(t *rapid.T) {
		w := rapid.Int64Range(1, 10*365*86400e9).Draw(t, "window")
		s := codec.LogShift(w)
		unit := int64(1) << s
		if steps := (w + unit - 1) / unit; steps > max21 {
			t.Fatalf("LogShift(%d) = %d: a window is %d steps", w, s, steps)
		}
		if s > 0 && (w+unit/2-1)/(unit/2) <= max21 {
			t.Fatalf("LogShift(%d) = %d: %d would do", w, s, s-1)
		}
	})
	for _, c := range []struct {
		w    time.Duration
		want uint8
	}{
		{time.Millisecond, 0}, // 1e6 ns < 2^21
		{time.Second, 9},      // 512 ns
		{time.Minute, 15},
		{time.Hour, 21},
		{24 * time.Hour, 26},
	} {
		if got := codec.LogShift(int64(c.w)); got != c.want {
			t.Errorf("LogShift(%v) = %d, want %d", c.w, got, c.want)
		}
	}
}

// TestLogBudget: a sliding log whose entries lie within one window costs the
// 10-byte header plus at most 3 bytes per further entry, for windows from
// 1 ms to 24 h.
func TestLogBudget(t *testing.T) {
	for _, w := range []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, 7 * time.Second, time.Minute, time.Hour, 24 * time.Hour} {
		shift := codec.LogShift(int64(w))
		// The worst case: every entry a whole window (less a nanosecond)
		// after the one before, which a live log never exceeds.
		w1 := int64(w) - 1
		lw := codec.NewLogWriter(nil, 1_700_000_000e9, shift)
		for range 100 {
			lw.Add(lw.Last() + w1)
		}
		if got, max := len(lw.Bytes()), codec.LogHeaderSize+3*100; got > max {
			t.Errorf("window %v: 101 entries a window apart take %d bytes, budget %d", w, got, max)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		w := rapid.Int64Range(int64(time.Millisecond), int64(24*time.Hour)).Draw(t, "window")
		shift := codec.LogShift(w)
		first := rapid.Int64Range(-1e18, 1e18).Draw(t, "first")
		times := []int64{first}
		lw := codec.NewLogWriter(nil, first, shift)
		for _, off := range rapid.SliceOf(rapid.Int64Range(0, w-1)).Draw(t, "offsets") {
			// Within one window of the first entry, in order.
			next := max(times[len(times)-1], first+off)
			times = append(times, next)
			lw.Add(next)
		}
		if got, budget := len(lw.Bytes()), codec.LogHeaderSize+3*(len(times)-1); got > budget {
			t.Fatalf("window %d: %d entries take %d bytes, budget %d", w, len(times), got, budget)
		}
	})
}

// TestLogRounding: each entry is stored at the resolution step at or after
// its time, counted from the entry before it, so a stored time is never
// earlier than the real one and less than one step later than the later of
// it and the entry before.
func TestLogRounding(t *testing.T) {
	// Shift 9: 512 ns steps.
	w := codec.NewLogWriter(nil, 1000, 9)
	for _, c := range []struct{ add, want int64 }{
		{1000, 1000}, // same instant: a zero delta
		{1001, 1512}, // 1 ns later: one step
		{1512, 1512}, // exactly on the stored time
		{1200, 1512}, // earlier than the last: stored with it
		{2024, 2024}, // exactly one step on
		{2025, 2536},
		{3048, 3048},
		{1000 + 512*1000 + 1, 1000 + 512*1001}, // many steps, rounded up
	} {
		w.Add(c.add)
		if got := w.Last(); got != c.want {
			t.Errorf("Add(%d): stored at %d, want %d", c.add, got, c.want)
		}
	}
	l, err := codec.DecodeLog(w.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{1000, 1000, 1512, 1512, 1512, 2024, 2536, 3048, 1000 + 512*1001}
	var got []int64
	it := l.Iter()
	for v, ok := it.Next(); ok; v, ok = it.Next() {
		got = append(got, v)
	}
	if l.Len != len(want) || l.Newest != want[len(want)-1] || !equal(got, want) {
		t.Errorf("decoded Len %d Newest %d entries %v, want %d, %d, %v", l.Len, l.Newest, got, len(want), want[len(want)-1], want)
	}
	// A repeated instant costs one byte.
	before := len(w.Bytes())
	w.Add(0)
	if len(w.Bytes()) != before+1 {
		t.Errorf("an entry at the same stored time took %d bytes", len(w.Bytes())-before)
	}

	rapid.Check(t, func(t *rapid.T) {
		shift := rapid.Uint8Range(0, 30).Draw(t, "shift")
		unit := int64(1) << shift
		first := rapid.Int64Range(-1e18, 1e18).Draw(t, "first")
		lw := codec.NewLogWriter(nil, first, shift)
		real := []int64{first}
		stored := []int64{first}
		for _, dt := range rapid.SliceOf(rapid.Int64Range(-3*unit, 3*unit)).Draw(t, "dts") {
			at := real[len(real)-1] + dt
			prev := stored[len(stored)-1]
			lw.Add(at)
			s := lw.Last()
			if s < at || s < prev || s >= max(at, prev)+unit || (s-prev)%unit != 0 {
				t.Fatalf("Add(%d) after %d at shift %d: stored at %d", at, prev, shift, s)
			}
			real, stored = append(real, at), append(stored, s)
		}
		l, err := codec.DecodeLog(lw.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		it := l.Iter()
		for v, ok := it.Next(); ok; v, ok = it.Next() {
			got = append(got, v)
		}
		if !equal(got, stored) || l.Len != len(stored) || l.Newest != stored[len(stored)-1] || l.Oldest != first || l.Shift != shift {
			t.Fatalf("decoded %+v entries %v, want %v", l, got, stored)
		}
	})
}

// TestLogIterRest: Rest is the encoded tail after the entry Next returned
// last; AddRaw appends such a tail to a writer of the same shift, which is
// how a step drops aged-out entries without decoding the rest.
func TestLogIterRest(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		shift := rapid.Uint8Range(0, 20).Draw(t, "shift")
		lw := codec.NewLogWriter(nil, rapid.Int64Range(-1e15, 1e15).Draw(t, "first"), shift)
		for _, dt := range rapid.SliceOfN(rapid.Int64Range(0, 1<<22), 1, 40).Draw(t, "dts") {
			lw.Add(lw.Last() + dt)
		}
		// Decoded from, and rewritten over, the same bytes, as the sliding
		// log does.
		rec := append([]byte(nil), lw.Bytes()...)
		l, err := codec.DecodeLog(rec)
		if err != nil {
			t.Fatal(err)
		}
		var all []int64
		it := l.Iter()
		for v, ok := it.Next(); ok; v, ok = it.Next() {
			all = append(all, v)
		}
		// Drop the first k entries.
		k := rapid.IntRange(0, len(all)-1).Draw(t, "drop")
		it = l.Iter()
		var first int64
		for range k + 1 {
			first, _ = it.Next()
		}
		rest := it.Rest()
		w := codec.NewLogWriter(rec, first, shift)
		w.AddRaw(rest, l.Newest)
		l2, err := codec.DecodeLog(w.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		it2 := l2.Iter()
		for v, ok := it2.Next(); ok; v, ok = it2.Next() {
			got = append(got, v)
		}
		if !equal(got, all[k:]) || l2.Newest != l.Newest || w.Last() != l.Newest {
			t.Fatalf("after dropping %d: %v, want %v", k, got, all[k:])
		}
	})
}

// TestLogExtremes: times before 1970 decode (a regression: the overflow
// check once compared against MaxInt64-t, which wraps for negative t), and
// entries within a step of the end of int64 time are clamped rather than
// written as a record that does not decode.
func TestLogExtremes(t *testing.T) {
	for _, first := range []int64{-1, -2, -5e9, -1e18, math.MinInt64, math.MinInt64 + 1} {
		w := codec.NewLogWriter(nil, first, 9)
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
	for _, c := range []struct {
		first, add int64
		shift      uint8
	}{
		{math.MaxInt64 - 1000, math.MaxInt64, 20},
		{math.MaxInt64 - 1, math.MaxInt64, 9},
		{math.MinInt64, math.MaxInt64, 0},
		{math.MinInt64, math.MaxInt64, 62},
		{-1, math.MaxInt64, 40},
	} {
		w := codec.NewLogWriter(nil, c.first, c.shift)
		w.Add(c.add)
		l, err := codec.DecodeLog(w.Bytes())
		if err != nil {
			t.Errorf("Add(%d) after %d at shift %d: %v", c.add, c.first, c.shift, err)
			continue
		}
		if l.Newest != w.Last() || l.Newest < c.first {
			t.Errorf("Add(%d) after %d at shift %d: Newest %d, Last %d", c.add, c.first, c.shift, l.Newest, w.Last())
		}
	}
	// A delta that would pass the end of int64 time does not decode.
	end := codec.NewLogWriter(nil, math.MaxInt64-10, 0)
	rec := append(end.Bytes(), 11)
	if _, err := codec.DecodeLog(rec); !errors.Is(err, codec.ErrInvalid) {
		t.Errorf("entry past MaxInt64: %v, want ErrInvalid", err)
	}
}

// TestDecodeErrors: each way a record can be wrong has its own error.
func TestDecodeErrors(t *testing.T) {
	gcra := codec.AppendGCRA(nil, codec.GCRA{TAT: 5})
	bucket := codec.AppendBucket(nil, codec.TagTokenBucket, codec.Bucket{Updated: 1, Level: 2})
	window := codec.AppendWindow(nil, codec.Window{Start: 1, Count: 2})
	counter := codec.AppendCounter(nil, codec.Counter{Start: 1, Count: 2, Previous: 3})
	lw := codec.NewLogWriter(nil, 1, 9)
	log := lw.Bytes()
	withHeader := func(b []byte, h byte) []byte { b = append([]byte(nil), b...); b[0] = h; return b }
	decoders := map[string]func([]byte) error{
		"gcra":    func(b []byte) error { _, err := codec.DecodeGCRA(b); return err },
		"token":   func(b []byte) error { _, err := codec.DecodeBucket(b, codec.TagTokenBucket); return err },
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
		{"short", "log", log[:9], codec.ErrTruncated},
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
		{"shift 63", "log", withHeader(append(log[:9:9], 63), 0x14), codec.ErrInvalid},
		{"unterminated delta", "log", append(append([]byte(nil), log...), 0x80), codec.ErrTruncated},
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
			b = []byte{byte(codec.Version<<4) | byte(rapid.IntRange(0, 7).Draw(t, "tag"))}
			n := rapid.SampledFrom([]int{8, 9, 10, 16, 17, 24, 25}).Draw(t, "body") + rapid.IntRange(-1, 1).Draw(t, "give or take")
			b = append(b, rapid.SliceOfN(rapid.Byte(), max(n, 0), max(n, 0)).Draw(t, "body bytes")...)
			if b[0]&0x0f == byte(codec.TagSlidingLog) && len(b) >= codec.LogHeaderSize {
				b[9] %= 64 // a plausible shift, and deltas after it
				b = append(b, rapid.SliceOf(rapid.Byte()).Draw(t, "deltas")...)
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
	if l, err := codec.DecodeLog(b); err == nil {
		// Valid: entries in order, as many as Len, ending at Newest, and
		// written back at the same shift they decode the same (the bytes
		// may differ: a uvarint may be written in more bytes than needed).
		it := l.Iter()
		first, ok := it.Next()
		if !ok || first != l.Oldest {
			t.Fatalf("DecodeLog(%x): first entry %d, %v; Oldest %d", b, first, ok, l.Oldest)
		}
		n, prev := 1, first
		w := codec.NewLogWriter(nil, first, l.Shift)
		for v, ok := it.Next(); ok; v, ok = it.Next() {
			if v < prev {
				t.Fatalf("DecodeLog(%x): entry %d at %d before %d", b, n, v, prev)
			}
			w.Add(v)
			if w.Last() != v {
				t.Fatalf("DecodeLog(%x): entry %d at %d is not on its own resolution", b, n, v)
			}
			n, prev = n+1, v
		}
		if n != l.Len || prev != l.Newest || l.Shift > 62 {
			t.Fatalf("DecodeLog(%x) = %+v, but %d entries ending at %d", b, l, n, prev)
		}
		l2, err := codec.DecodeLog(w.Bytes())
		if err != nil || l2.Len != l.Len || l2.Newest != l.Newest || l2.Oldest != l.Oldest {
			t.Fatalf("DecodeLog(%x) = %+v; rewritten %+v, %v", b, l, l2, err)
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
	lw := codec.NewLogWriter(nil, -5e9, 9)
	lw.Add(-5e9 + 1)
	lw.Add(-4e9)
	f.Add(lw.Bytes())
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
	}
	w := codec.NewLogWriter(nil, 100, codec.LogShift(int64(time.Second)))
	w.Add(100)
	good["log"] = w.Bytes()
	for name, rec := range good {
		if !codec.Valid(rec) {
			t.Errorf("codec.Valid(%s %x) = false", name, rec)
		}
		if len(rec) > 1 && name != "log" && codec.Valid(rec[:len(rec)-1]) {
			t.Errorf("codec.Valid(%s cut short %x) = true", name, rec[:len(rec)-1])
		}
	}
	for _, rec := range [][]byte{nil, {}, {0x1f}, {0x21, 0, 0, 0, 0, 0, 0, 0, 0}, []byte("token_bucket")} {
		if codec.Valid(rec) {
			t.Errorf("codec.Valid(%x) = true", rec)
		}
	}
}
