package fuzz

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/engine"
)

// storedT0 is the engines' time in FuzzEngineStoredBytes.
var storedT0 = time.Unix(1_700_000_040, 0)

// FuzzEngineStoredBytes: any bytes stored under a key, in the memory store
// or on Pebble under the durable tier, are read by Apply without a panic or
// an error. The answer is valid (Limit the capacity, Remaining within
// 0..Limit, no negative duration, a denial with a positive RetryAfter); a
// record that does not decode is counted in Stats().CorruptRecords and
// treated as absent, so the request is allowed; and either way the key's
// next request finds a record that decodes.
func FuzzEngineStoredBytes(f *testing.F) {
	now := storedT0.UnixNano()
	for i, name := range algo.Names {
		a := algo.MustNew(name, algo.Params{Limit: 3, Window: time.Minute})
		rec, _ := a.Step(nil, now, 1)
		f.Add(append([]byte(nil), rec...), uint8(i), uint16(3), uint32(60_000), uint8(0), uint8(1))
		f.Add(append([]byte(nil), rec[:len(rec)/2]...), uint8(i), uint16(3), uint32(60_000), uint8(0), uint8(1))
		f.Add(append([]byte(nil), rec...), uint8(i+1), uint16(10), uint32(1), uint8(20), uint8(3))
	}
	f.Add([]byte{}, uint8(0), uint16(1), uint32(1000), uint8(0), uint8(1))
	f.Add([]byte{0xff, 0xff, 0xff}, uint8(5), uint16(1), uint32(1000), uint8(0), uint8(1))

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	clock := engine.NewFakeClock(storedT0)
	mem := memory.New(&memory.Options{SweepInterval: -1})
	em, err := engine.New(mem, &engine.Options{Clock: clock, Logger: quiet})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { em.Close() })
	disk, err := pebble.Open(f.TempDir(), &pebble.Options{SweepInterval: -1})
	if err != nil {
		f.Fatal(err)
	}
	ep, err := engine.New(disk, &engine.Options{Clock: clock, Logger: quiet, FlushInterval: time.Hour})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { ep.Close() })
	stores := []struct {
		name string
		raw  backend.Backend // where the bytes are planted
		e    *engine.Engine
	}{{"memory", mem, em}, {"pebble", disk, ep}}
	var seq atomic.Int64

	f.Fuzz(func(t *testing.T, record []byte, which uint8, limit uint16, windowMs uint32, burst uint8, cost uint8) {
		name := algo.Names[int(which)%len(algo.Names)]
		p := algo.Params{Limit: int64(limit%1000) + 1, Window: time.Duration(windowMs%86_400_000+1) * time.Millisecond}
		if name == algo.TokenBucketName || name == algo.LeakyBucketName || name == algo.GCRAName {
			p.Burst = int64(burst)
		}
		a, err := algo.New(name, p)
		if err != nil {
			return // parameters the algorithm refuses: not this target's concern
		}
		l := engine.Limit{Namespace: string(name), Algorithm: a}
		c := int64(cost)%a.Params().Capacity() + 1
		for _, st := range stores {
			key := fmt.Sprintf("k%d", seq.Add(1)) // a key new to the engine: the durable tier loads it
			if err := st.raw.Put(engine.AppendKey(nil, l.Namespace, key), record, 0); err != nil {
				t.Fatalf("%s: Put: %v", st.name, err)
			}
			before := st.e.Stats().CorruptRecords
			d, err := st.e.Apply(context.Background(), l, key, c)
			if err != nil {
				t.Fatalf("%s: Apply over %x: %v", st.name, record, err)
			}
			check(t, st.name+" first", d, a.Params().Capacity())
			counted := st.e.Stats().CorruptRecords - before
			switch {
			case d.CorruptState && counted != 1:
				t.Fatalf("%s: corrupt record %x counted %d times", st.name, record, counted)
			case !d.CorruptState && counted != 0:
				t.Fatalf("%s: record %x decoded, yet %d corrupt counted", st.name, record, counted)
			case d.CorruptState && !d.Allowed:
				t.Fatalf("%s: corrupt record %x not treated as absent: %+v", st.name, record, d)
			}
			d2, err := st.e.Apply(context.Background(), l, key, 1)
			if err != nil {
				t.Fatalf("%s: second Apply: %v", st.name, err)
			}
			if d2.CorruptState {
				t.Fatalf("%s: the record left after %x still does not decode", st.name, record)
			}
			check(t, st.name+" second", d2, a.Params().Capacity())
		}
	})
}

func check(t *testing.T, call string, d algo.Decision, capacity int64) {
	t.Helper()
	switch {
	case d.Limit != capacity:
		t.Fatalf("%s: Limit %d, want the capacity %d", call, d.Limit, capacity)
	case d.Remaining < 0 || d.Remaining > d.Limit:
		t.Fatalf("%s: Remaining %d outside 0..%d", call, d.Remaining, d.Limit)
	case d.RetryAfter < 0 || d.Reset < 0 || d.TTL < 0 || d.Delay < 0:
		t.Fatalf("%s: negative duration in %+v", call, d)
	case !d.Allowed && d.RetryAfter <= 0:
		t.Fatalf("%s: denied without a positive RetryAfter: %+v", call, d)
	}
}
