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
