package pebble

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
)

// benchKeys is the key space of the Get/Put benchmarks.
const benchKeys = 100_000

// benchStore opens a store in a temporary directory holding benchKeys
// records of 17 bytes, with no sweeper, and returns it with its keys.
func benchStore(b *testing.B) (*Store, [][]byte) {
	b.Helper()
	s, err := Open(b.TempDir(), &Options{SweepInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	keys := make([][]byte, benchKeys)
	writes := make([]backend.Write, 0, 10_000)
	value := make([]byte, 17)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "rule:api/user:%08d", i)
		writes = append(writes, backend.Write{Key: keys[i], Value: value, ExpiresAt: t0})
		if len(writes) == cap(writes) {
			if err := s.WriteBatch(writes, false); err != nil {
				b.Fatal(err)
			}
			writes = writes[:0]
		}
	}
	return s, keys
}

// BenchmarkGetPut is the engine's cold path: read one of 100,000 records,
// write a 17-byte record back (unsynced).
func BenchmarkGetPut(b *testing.B) {
	s, keys := benchStore(b)
	r := rand.New(rand.NewPCG(1, 2))
	value := make([]byte, 17)
	now := t0 - int64(time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		k := keys[r.IntN(len(keys))]
		if _, err := s.Get(k, now); err != nil {
			b.Fatal(err)
		}
		if err := s.Put(k, value, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetPutParallel is BenchmarkGetPut from GOMAXPROCS goroutines.
func BenchmarkGetPutParallel(b *testing.B) {
	s, keys := benchStore(b)
	now := t0 - int64(time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(rand.Uint64(), 2))
		value := make([]byte, 17)
		for pb.Next() {
			k := keys[r.IntN(len(keys))]
			if _, err := s.Get(k, now); err != nil {
				b.Error(err)
				return
			}
			if err := s.Put(k, value, t0); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkWriteBatch1000 writes batches of 1000 records of 17 bytes, as the
// engine's interval flush does, and reports the cost per record.
func BenchmarkWriteBatch1000(b *testing.B) {
	s, keys := benchStore(b)
	writes := make([]backend.Write, 1000)
	value := make([]byte, 17)
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for b.Loop() {
		for i := range writes {
			writes[i] = backend.Write{Key: keys[n%len(keys)], Value: value, ExpiresAt: t0}
			n++
		}
		if err := s.WriteBatch(writes, false); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/key")
}

// BenchmarkWriteBatchSync writes one record per synced batch: the latency of
// the engine's sync mode with a single caller.
func BenchmarkWriteBatchSync(b *testing.B) {
	s, keys := benchStore(b)
	value := make([]byte, 17)
	writes := make([]backend.Write, 1)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		writes[0] = backend.Write{Key: keys[i%len(keys)], Value: value, ExpiresAt: t0}
		i++
		if err := s.WriteBatch(writes, true); err != nil {
			b.Fatal(err)
		}
	}
}
