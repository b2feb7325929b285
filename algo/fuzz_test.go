package algo

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/sluice-go/sluice/codec"
)

// fuzzParams turns arbitrary integers into valid parameters for the
// algorithm chosen by which, or reports false for the few that New still
// refuses (a burst too slow to refill, a GCRA interval under 1 ns).
func fuzzParams(which uint8, limit, window, burst int64) (Name, Params, bool) {
	name := Names[int(which)%len(Names)]
	maxLimit := uint64(MaxLimit)
	if name == SlidingLogName {
		maxLimit = 1000 // the record grows with the limit; keep steps fast
	}
	// 1+(n-1)%max maps 1..max to itself, so seeds read naturally.
	p := Params{
		Limit:  1 + int64((uint64(limit)-1)%maxLimit),
		Window: time.Duration(1 + (uint64(window)-1)%uint64(MaxWindow)),
	}
	if isBucket(name) && burst != 0 {
		p.Burst = 1 + int64((uint64(burst)-1)%MaxLimit)
	}
	if _, err := New(name, p); err != nil {
		return "", p, false
	}
	return name, p, true
}

// decodes reports whether record is a valid record of the named
// algorithm, of any version this release reads.
func decodes(name Name, record []byte) bool {
	k, _ := kindOf(name)
	_, tag, err := codec.Header(record)
	return err == nil && tag == k.tag && codec.Valid(record)
}

// written reports whether record is a valid record of the named algorithm
// at the version this release writes.
func written(name Name, record []byte) bool {
	k, _ := kindOf(name)
	v, _, _ := codec.Header(record)
	return decodes(name, record) && v == codec.Latest(k.tag)
}

// FuzzStep runs each algorithm's Step on arbitrary record bytes, times and
// costs. Step never panics; an admitted request has a cost in 1..capacity
// and yields a record that decodes as the same algorithm; a denial writes
// nothing and leaves the record it was given alone; no duration is
// negative; CorruptState is set exactly when a record was given and does
// not decode; and the same call twice gives the same answer.
func FuzzStep(f *testing.F) {
	for i := range Names {
		a := MustNew(Names[i], Params{Limit: 5, Window: time.Second})
		rec, _ := a.Step(nil, 1_700_000_000e9, 2)
		for _, c := range []struct {
			state     []byte
			now, cost int64
		}{
			{nil, 1_700_000_000e9, 1},
			{rec, 1_700_000_000e9 + 3e8, 3},
			{rec, 1_700_000_000e9 - 3e8, 5},
			{rec, math.MaxInt64, 1},
			{rec, math.MinInt64, 1},
			{rec, 0, 6},
			{rec, 0, 0},
			{rec, 0, math.MinInt64},
			{rec[:len(rec)-1], 1_700_000_000e9, 1},
			{[]byte{0x1f}, 0, 1},
		} {
			f.Add(uint8(i), int64(4), int64(time.Second), int64(0), c.state, c.now, c.cost)
		}
	}
	// Records holding extreme values, valid to the codec: the arithmetic
	// must neither overflow into an admission nor write what does not
	// decode.
	lw := codec.NewLogWriter(nil, math.MaxInt64-1e9)
	lw.Add(math.MaxInt64 - 1)
	for _, c := range []struct {
		name  Name
		state []byte
	}{
		{TokenBucketName, codec.AppendBucket(nil, codec.TagTokenBucket, codec.Bucket{Updated: math.MinInt64, Level: math.MaxInt64})},
		{LeakyBucketName, codec.AppendBucket(nil, codec.TagLeakyBucket, codec.Bucket{Updated: math.MaxInt64, Level: math.MaxInt64})},
		{FixedWindowName, codec.AppendWindow(nil, codec.Window{Start: 1_700_000_000e9, Count: math.MaxInt64})},
		{FixedWindowName, codec.AppendWindow(nil, codec.Window{Start: math.MaxInt64, Count: 0})},
		{SlidingCounterName, codec.AppendCounter(nil, codec.Counter{Start: 1_700_000_000e9, Count: math.MaxInt64, Previous: math.MaxInt64})},
		{SlidingCounterName, codec.AppendCounter(nil, codec.Counter{Start: 1_699_999_999e9, Count: math.MaxInt64, Previous: 0})},
		{SlidingLogName, lw.Bytes()},
		{GCRAName, codec.AppendGCRA(nil, codec.GCRA{TAT: math.MaxInt64})},
	} {
		which := uint8(0)
		for i, n := range Names {
			if n == c.name {
				which = uint8(i)
			}
		}
		for _, now := range []int64{1_700_000_000e9, math.MaxInt64, math.MinInt64} {
			f.Add(which, int64(4), int64(time.Second), int64(0), c.state, now, int64(1))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, limit, window, burst int64, state []byte, now, cost int64) {
		name, p, ok := fuzzParams(which, limit, window, burst)
		if !ok {
			return
		}
		a := MustNew(name, p)
		capacity := p.Capacity()
		in := clone(state) // Step may write in place; the input stays the fuzzer's
		next, d := a.Step(in, now, cost)

		if d.Allowed && (cost < 1 || cost > capacity) {
			t.Fatalf("%s %+v: Step(cost %d) admitted, capacity %d", name, p, cost, capacity)
		}
		if d.RetryAfter < 0 || d.Reset < 0 || d.TTL < 0 || d.Delay < 0 {
			t.Fatalf("%s %+v: negative duration in %+v", name, p, d)
		}
		if d.Remaining < 0 || d.Remaining > capacity || d.Limit != capacity {
			t.Fatalf("%s %+v: Remaining %d, Limit %d, capacity %d", name, p, d.Remaining, d.Limit, capacity)
		}
		// Corrupt: present and neither this algorithm's record nor another
		// algorithm's valid one (which a changed rule starts afresh from).
		if want := len(state) != 0 && !decodes(name, state) && !codec.Valid(state); d.CorruptState != want {
			t.Fatalf("%s %+v: CorruptState = %v for record %x", name, p, d.CorruptState, state)
		}
		if d.Allowed {
			if next == nil || !written(name, next) {
				t.Fatalf("%s %+v: Step(%x, %d, %d) admitted and wrote %x, which does not decode", name, p, state, now, cost, next)
			}
		} else {
			if next != nil || d.RetryAfter <= 0 {
				t.Fatalf("%s %+v: denied with record %x, RetryAfter %v", name, p, next, d.RetryAfter)
			}
			if !bytes.Equal(in, state) {
				t.Fatalf("%s %+v: a denial changed the record it was given", name, p)
			}
		}
		next2, d2 := a.Step(clone(state), now, cost)
		if d2 != d || !bytes.Equal(next2, next) {
			t.Fatalf("%s %+v: the same call twice: %+v %x, then %+v %x", name, p, d, next, d2, next2)
		}
	})
}
