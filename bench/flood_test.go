package bench

// HotKeyUnderFlood: a legitimate caller's cost while an attacker floods the
// limiter with fresh keys.
//
//   - HotKeyUnderFlood/<store>/unloaded: one hot key through the engine,
//     from one goroutine, every call allowed (Unlimited), nothing else
//     running but the store's own background work.
//   - HotKeyUnderFlood/<store>/flooded: the same, while a background
//     goroutine sends floodRate distinct keys a second (a steady flood,
//     ticked every millisecond, never faster) under a second rule of limit 1
//     a second, so every flood key lives one second; the memory store's
//     sweeper (and over Pebble the tier's flusher and Pebble's sweeper) run
//     as users run them, at their defaults. The flood runs for a second
//     before the timing starts, so the live flood keys are at their steady
//     count (about floodRate), and flood-keys/s reports the rate it held
//     while the hot key was timed.
//
// <store> is memory (the memory backend) or pebble-interval (Pebble under
// the engine's in-memory tier, Interval mode). The target is
// flooded within 2× of unloaded, medians of several counts. allocs/op in
// the flooded rows counts the flood goroutine's allocations too (the
// runtime's counters are process-wide): the hot key's own path allocates
// nothing, as the unloaded rows show.

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
)

// floodRate is the background flood's rate in distinct keys per second.
const floodRate = 50_000

// floodLimit is the rule the flood's keys fall under: one request a second,
// so each flood key's record expires a second after it arrives.
var floodLimit = engine.Limit{
	Namespace: "flood",
	Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 1, Window: time.Second}),
}

// flood sends distinct keys through e at rate keys a second until stop is
// closed, counting them in sent. A tick that finds the flood behind sends
// the keys it owes, at most 10ms worth (the rest is forgiven, so a stall is
// never followed by a burst), and it never runs ahead of rate. The first
// error stops it and is stored in failed.
func flood(e *engine.Engine, rate int, stop <-chan struct{}, sent *atomic.Int64, failed *atomic.Value) {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	start := time.Now()
	maxOwed := int64(rate / 100)
	var forgiven int64
	buf := make([]byte, 0, 32)
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		owed := int64(time.Since(start).Seconds()*float64(rate)) - forgiven - sent.Load()
		if owed > maxOwed {
			forgiven += owed - maxOwed
			owed = maxOwed
		}
		for range owed {
			buf = strconv.AppendInt(append(buf[:0], "ip:198.51."...), sent.Load(), 10)
			d, err := e.Apply(context.Background(), floodLimit, string(buf), 1)
			if err == nil && !d.Allowed {
				err = errFloodDenied
			}
			if err != nil {
				failed.Store(err)
				return
			}
			sent.Add(1)
		}
	}
}

// errFloodDenied reports a flood key denied on its first request: two
// flood keys collided.
var errFloodDenied = floodError("a fresh flood key was denied")

type floodError string

func (e floodError) Error() string { return "bench: " + string(e) }

func BenchmarkHotKeyUnderFlood(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) (*Sluice, error)
	}{
		{"memory", func(*testing.B) (*Sluice, error) {
			return NewSluice(algo.TokenBucketName, Unlimited, nil, nil)
		}},
		{"pebble-interval", func(b *testing.B) (*Sluice, error) {
			return NewDurableSluice(StorePebble, b.TempDir(), engine.Interval, algo.TokenBucketName, Unlimited)
		}},
	}
	for _, st := range stores {
		for _, flooded := range []bool{false, true} {
			name := st.name + "/unloaded"
			if flooded {
				name = st.name + "/flooded"
			}
			b.Run(name, func(b *testing.B) {
				s, err := st.open(b)
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				if ok, err := s.Allow("user:hot"); err != nil || !ok {
					b.Fatalf("hot key: allowed %v, error %v", ok, err)
				}
				var (
					sent   atomic.Int64
					failed atomic.Value
					stop   = make(chan struct{})
					wg     sync.WaitGroup
				)
				if flooded {
					wg.Go(func() { flood(s.e, floodRate, stop, &sent, &failed) })
					time.Sleep(time.Second) // the live flood keys reach their steady count
				}
				from, start := sent.Load(), time.Now()
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					d, err := s.e.Apply(context.Background(), s.l, "user:hot", 1)
					if err != nil || !d.Allowed {
						b.Fatalf("hot key: allowed %v, error %v", d.Allowed, err)
					}
				}
				b.StopTimer()
				elapsed := time.Since(start)
				close(stop)
				wg.Wait()
				if err, _ := failed.Load().(error); err != nil {
					b.Fatalf("flood: %v", err)
				}
				if flooded {
					keys := sent.Load() - from
					b.ReportMetric(float64(keys)/elapsed.Seconds(), "flood-keys/s")
					// A flood that stalled would make the comparison
					// meaningless: it must hold most of its rate.
					if elapsed > 200*time.Millisecond && float64(keys) < 0.5*floodRate*elapsed.Seconds() {
						b.Errorf("the flood held %.0f keys/s of the %d asked", float64(keys)/elapsed.Seconds(), floodRate)
					}
					b.ReportMetric(float64(s.Len()), "live-keys")
				}
			})
		}
	}
}
