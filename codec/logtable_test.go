package codec_test

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-go/sluice/codec"
)

// drawTimes draws a log's entries: in order, at least one, bunched (gaps of
// nothing or a little) or spread (gaps up to an hour), anywhere in int64
// time but never past it.
func drawTimes(t *rapid.T) []int64 {
	first := rapid.OneOf(rapid.Int64Range(-1e18, 1e18), rapid.SampledFrom([]int64{math.MinInt64, -1, 0, math.MaxInt64 - 4e12})).Draw(t, "first")
	times := []int64{first}
	for _, gap := range rapid.SliceOfN(rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, 300), rapid.Int64Range(0, 36e11)), 0, 40).Draw(t, "gaps") {
		last := times[len(times)-1]
		times = append(times, last+min(gap, math.MaxInt64-last))
	}
	return times
}

// tableTimes returns the entries of a version 4 log, through DecodeLog and
// its iterator, checking what DecodeLog says of them.
func tableTimes(t *rapid.T, rec []byte) []int64 {
	l, err := codec.DecodeLog(rec)
	if err != nil {
		t.Fatalf("DecodeLog(%x): %v", rec, err)
	}
	var got []int64
	it := l.Iter()
	for v, ok := it.Next(); ok; v, ok = it.Next() {
		got = append(got, v)
	}
	if len(got) != l.Len || got[0] != l.Oldest || got[len(got)-1] != l.Newest || l.Version != 4 {
		t.Fatalf("DecodeLog(%x) = %+v, entries %v", rec, l, got)
	}
	return got
}

// TestLogTable: a version 4 log holds its entries exactly; ReadLogTable
// counts those at or before any horizon; Rewrite keeps the entries from any
// index, adds entries at a time not before them, through any number of
// steps (the base kept, or moved when the offsets outgrow the width), and
// gives exactly the entries asked for, in place when the width holds and
// the array has room, keeping the length when it drops as many as it adds.
func TestLogTable(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		times := drawTimes(t)
		rec := codec.AppendLogTable(nil, times)
		if got := tableTimes(t, rec); !slices.Equal(got, times) {
			t.Fatalf("AppendLogTable(%v) holds %v", times, got)
		}
		for step := range rapid.IntRange(1, 8).Draw(t, "steps") {
			horizon := rapid.OneOf(rapid.SampledFrom(times), rapid.Int64()).Draw(t, "horizon") + rapid.Int64Range(-1, 1).Draw(t, "give or take")
			l, aged, err := codec.ReadLogTable(rec, horizon)
			if err != nil {
				t.Fatalf("step %d: ReadLogTable(%x): %v", step, rec, err)
			}
			want := 0
			for want < len(times) && times[want] <= horizon {
				want++
			}
			if aged != want || l.Len != len(times) || l.Newest() != times[len(times)-1] {
				t.Fatalf("step %d: ReadLogTable(%v, %d) = %+v, %d aged; want %d", step, times, horizon, l, aged, want)
			}
			for i, v := range times {
				if l.At(i) != v {
					t.Fatalf("step %d: At(%d) = %d, want %d", step, i, l.At(i), v)
				}
			}
			from := rapid.IntRange(0, len(times)).Draw(t, "from")
			n := rapid.IntRange(1, 5).Draw(t, "n")
			at := times[len(times)-1]
			if from == len(times) {
				at = rapid.Int64Range(math.MinInt64/2, math.MaxInt64/2).Draw(t, "fresh at")
			}
			if at < math.MaxInt64-4e12 {
				at += rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, 1000), rapid.Int64Range(0, 4e12)).Draw(t, "later")
			}
			next := append(slices.Clone(times[from:]), make([]int64, n)...)
			for i := len(times) - from; i < len(next); i++ {
				next[i] = at
			}
			room := rapid.IntRange(0, 64).Draw(t, "room")
			dst := append(make([]byte, 0, len(rec)+room), rec...)
			l, _, _ = codec.ReadLogTable(dst, math.MinInt64)
			got := l.Rewrite(dst, from, n, at)
			if g := tableTimes(t, got); !slices.Equal(g, next) {
				t.Fatalf("step %d: Rewrite(%v, from %d, %d at %d) holds %v, want %v", step, times, from, n, at, g, next)
			}
			r, _, _ := codec.ReadLogTable(got, math.MinInt64)
			if r.Width > l.Width && len(next) > n && &got[0] == &dst[0] {
				t.Fatalf("step %d: Rewrite grew the width from %d to %d in place", step, l.Width, r.Width)
			}
			if r.Width <= l.Width && cap(dst) >= len(got) && &got[0] != &dst[0] {
				t.Fatalf("step %d: Rewrite into %d bytes of room did not write in place (%d bytes)", step, cap(dst), len(got))
			}
			if from == n && r.Width == l.Width && len(got) != len(dst) {
				t.Fatalf("step %d: dropping %d entries and adding as many changed the length from %d to %d", step, n, len(dst), len(got))
			}
			rec, times = got, next
		}
	})
}

// TestLogTableErrors: a version 4 log with a width outside 1 to 8, cut in
// the middle of an offset, with an entry before the one before it, or whose
// newest entry overflows int64 does not decode; nor does any version 3
// record (there is none).
func TestLogTableErrors(t *testing.T) {
	good := codec.AppendLogTable(nil, []int64{1000, 1005, 2000})
	with := func(i int, c byte) []byte { b := bytes.Clone(good); b[i] = c; return b }
	for _, c := range []struct {
		name string
		rec  []byte
		want error
	}{
		{"header only", good[:codec.LogTableHeaderSize], codec.ErrTruncated},
		{"width 0", with(9, 0), codec.ErrInvalid},
		{"width 9", with(9, 9), codec.ErrInvalid},
		{"cut offset", good[:len(good)-1], codec.ErrTruncated},
		{"out of order", with(codec.LogTableHeaderSize+2, 0xff), codec.ErrInvalid},
		{"overflow", append([]byte{0x44, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf0, 1}, 0, 0x20), codec.ErrInvalid},
		{"version 3", with(0, 0x34), codec.ErrVersion},
	} {
		if _, err := codec.DecodeLog(c.rec); !errors.Is(err, c.want) {
			t.Errorf("%s: DecodeLog(%x) = %v, want %v", c.name, c.rec, err, c.want)
		}
		if codec.Valid(c.rec) {
			t.Errorf("%s: Valid(%x) = true", c.name, c.rec)
		}
	}
	if !codec.Valid(good) || codec.Latest(codec.TagSlidingLog) != 4 {
		t.Errorf("Valid(%x) = %v, Latest(sliding_log) = %d", good, codec.Valid(good), codec.Latest(codec.TagSlidingLog))
	}
}

// TestAddLog: AddLog answers as ReadLogTable and Rewrite do, for valid
// records and for records with a byte changed or cut: invalid exactly when
// ReadLogTable fails; the entries aged and live at any horizon; full
// exactly when n is under 1 or the live entries leave no room for it under
// the limit, with the newest entry's time; otherwise the very bytes Rewrite
// writes, in place when it adds them (the base kept and the array roomy
// enough), and the record untouched whenever it does not.
func TestAddLog(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		times := drawTimes(t)
		rec := codec.AppendLogTable(nil, times)
		switch rapid.IntRange(0, 3).Draw(t, "damage") {
		case 1:
			i := rapid.IntRange(0, len(rec)-1).Draw(t, "at")
			rec[i] = rapid.Byte().Draw(t, "byte")
		case 2:
			rec = rec[:rapid.IntRange(0, len(rec)).Draw(t, "cut")]
		}
		horizon := rapid.OneOf(rapid.SampledFrom(times), rapid.Int64()).Draw(t, "horizon") + rapid.Int64Range(-1, 1).Draw(t, "give or take")
		limit := rapid.Int64Range(1, 50).Draw(t, "limit")
		n := rapid.Int64Range(-1, 8).Draw(t, "n")
		at := rapid.OneOf(rapid.SampledFrom(times), rapid.Int64()).Draw(t, "t") + rapid.Int64Range(0, 1e12).Draw(t, "later")
		room := rapid.IntRange(0, 64).Draw(t, "room")
		dst := append(make([]byte, 0, len(rec)+room), rec...)

		r, aged, live, when, res := codec.AddLog(dst, horizon, limit, n, at)
		l, wantAged, err := codec.ReadLogTable(rec, horizon)
		if (res == codec.LogInvalid) != (err != nil) {
			t.Fatalf("AddLog(%x) = %v, ReadLogTable: %v", rec, res, err)
		}
		if err != nil {
			return
		}
		if aged != wantAged || live != l.Len-wantAged {
			t.Fatalf("AddLog(%x, %d) = %d aged, %d live; want %d of %d", rec, horizon, aged, live, wantAged, l.Len)
		}
		full := n < 1 || n > limit-int64(live)
		if (res == codec.LogFull) != full {
			t.Fatalf("AddLog(%x, limit %d, n %d) = %v with %d live", rec, limit, n, res, live)
		}
		if res != codec.LogAdded && !bytes.Equal(dst, rec) {
			t.Fatalf("AddLog(%x) = %v and changed the record to %x", rec, res, dst)
		}
		if full {
			if when != l.Newest() || !bytes.Equal(r.Bytes(), rec) || aged < l.Len && r.At(aged) != l.At(aged) {
				t.Fatalf("AddLog(%x) full: newest %d, want %d", rec, when, l.Newest())
			}
			return
		}
		wantAt := at
		if live > 0 {
			wantAt = max(at, l.Newest())
		}
		if when != wantAt {
			t.Fatalf("AddLog(%x, t %d) adds at %d, want %d", rec, at, when, wantAt)
		}
		ref := append(make([]byte, 0, cap(dst)), rec...)
		rl, _, _ := codec.ReadLogTable(ref, horizon)
		want := rl.Rewrite(ref, aged, int(n), wantAt)
		inPlace := &want[0] == &ref[0] && rl.Width == int(rec[9]) && live > 0 && i64(want[1:]) == l.Base
		if res == codec.LogAdded {
			if !bytes.Equal(r.Bytes(), want) || &r.Bytes()[0] != &dst[0] {
				t.Fatalf("AddLog(%x, %d at %d) wrote %x, want %x in place", rec, n, at, r.Bytes(), want)
			}
		} else if inPlace {
			t.Fatalf("AddLog(%x, %d at %d) = %v; Rewrite wrote %x in place", rec, n, at, res, want)
		}
	})
}

// i64 reads a big-endian int64.
func i64(b []byte) int64 {
	var v int64
	for _, c := range b[:8] {
		v = v<<8 | int64(c)
	}
	return v
}

// FuzzAddLog runs AddLog on arbitrary bytes and arguments: it never
// panics, it refuses exactly the records ReadLogTable refuses, counts the
// entries as it does, and what it writes is a valid log of the entries
// kept and added.
func FuzzAddLog(f *testing.F) {
	f.Add(codec.AppendLogTable(nil, []int64{-5e9, -5e9 + 1, -4e9}), int64(-5e9), int64(3), int64(1), int64(-3e9), uint8(8))
	f.Add(codec.AppendLogTable(nil, []int64{1e9, 2e9, 3e9, 4e9, 5e9}), int64(2e9), int64(5), int64(2), int64(6e9), uint8(0))
	f.Add([]byte{0x44, 0, 0, 0, 0, 0, 0, 0, 0, 9, 1}, int64(0), int64(1), int64(1), int64(0), uint8(4))
	f.Fuzz(func(t *testing.T, rec []byte, horizon, limit, n, at int64, room uint8) {
		dst := append(make([]byte, 0, len(rec)+int(room)), rec...)
		r, aged, live, when, res := codec.AddLog(dst, horizon, limit, n, at)
		l, wantAged, err := codec.ReadLogTable(rec, horizon)
		if (res == codec.LogInvalid) != (err != nil) {
			t.Fatalf("AddLog(%x) = %v, ReadLogTable: %v", rec, res, err)
		}
		if err != nil {
			return
		}
		if aged != wantAged || live != l.Len-wantAged {
			t.Fatalf("AddLog(%x, %d) = %d aged, %d live; want %d of %d", rec, horizon, aged, live, wantAged, l.Len)
		}
		if res != codec.LogAdded {
			if !bytes.Equal(dst, rec) {
				t.Fatalf("AddLog(%x) = %v and changed the record", rec, res)
			}
			return
		}
		got := tableTimesOf(t, r.Bytes())
		want := []int64{}
		for i := aged; i < l.Len; i++ {
			want = append(want, l.At(i))
		}
		for range n {
			want = append(want, when)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("AddLog(%x, %d, %d at %d) holds %v, want %v", rec, horizon, n, at, got, want)
		}
	})
}

// tableTimesOf returns the entries of a version 4 log through ReadLogTable.
func tableTimesOf(t *testing.T, rec []byte) []int64 {
	l, _, err := codec.ReadLogTable(rec, math.MinInt64)
	if err != nil {
		t.Fatalf("ReadLogTable(%x): %v", rec, err)
	}
	times := make([]int64, l.Len)
	for i := range times {
		times[i] = l.At(i)
	}
	return times
}

// TestAddLogEveryWidth: an admission in place writes the same record as
// Rewrite, and the entries it should hold, at every offset width, 1 to 8
// bytes, the new entries' offsets stored over what the array held before
// (the bytes of the entry that aged out, then junk past the record).
func TestAddLogEveryWidth(t *testing.T) {
	for w := 1; w <= 8; w++ {
		for n := int64(1); n <= 3; n++ {
			span := int64(1)<<(8*w-1) - 1 // needs exactly w bytes
			if w == 8 {
				span = math.MaxInt64 - 2e9
			}
			base := int64(1e9)
			times := []int64{base, base + span/4, base + span/2}
			rec := codec.AppendLogTable(nil, times)
			if got := int(rec[9]); got != w {
				t.Fatalf("width %d: the record's width is %d", w, got)
			}
			horizon := base // the oldest entry ages out
			at := base + span/2 + 1
			dst := append(make([]byte, 0, len(rec)+64), rec...)
			dst = append(dst, bytes.Repeat([]byte{0xa5}, 64)...)[:len(rec)]
			r, aged, live, _, res := codec.AddLog(dst, horizon, 10, n, at)
			if res != codec.LogAdded || aged != 1 || live != 2 {
				t.Fatalf("width %d, n %d: AddLog = %v, %d aged, %d live; want added, 1, 2", w, n, res, aged, live)
			}
			l, _, err := codec.ReadLogTable(rec, horizon)
			if err != nil {
				t.Fatal(err)
			}
			want := l.Rewrite(nil, aged, int(n), at)
			if !bytes.Equal(r.Bytes(), want) {
				t.Fatalf("width %d, n %d: AddLog wrote\n%x\nRewrite writes\n%x", w, n, r.Bytes(), want)
			}
			// And the entries read back are the two kept, then n at at.
			wantTimes := []int64{times[1], times[2]}
			for range n {
				wantTimes = append(wantTimes, at)
			}
			if got := tableTimesOf(t, r.Bytes()); !slices.Equal(got, wantTimes) {
				t.Fatalf("width %d, n %d: entries %v, want %v", w, n, got, wantTimes)
			}
		}
	}
}
