package backendtest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
)

// benchKeys is the key space of BenchDurable.
const benchKeys = 100_000

// BenchDurable runs the benchmarks every durable store reports, each on a
// store freshly opened in a temporary directory and holding 100,000 records
// of 17 bytes:
//
//   - GetPut: the engine's cold path, read one record and write a 17-byte
//     record back with Put;
//   - GetPutParallel: GetPut from GOMAXPROCS goroutines;
//   - WriteBatch1000: batches of 1000 records (sync false), as the engine's
//     interval flush writes them, reporting ns per record;
//   - WriteBatchSync: one record per synced batch, the latency of the
//     engine's sync mode with a single caller.
//
// Each runs in the default configuration, in a sub-benchmark named
// "default"; GetPut and GetPutParallel also run in Durable.Fast when it
// names another, in a sub-benchmark of that name.
func BenchDurable(b *testing.B, d Durable) {
	configs := []string{""}
	if d.Fast != "" {
		configs = append(configs, d.Fast)
	}
	run := func(name string, configs []string, fn func(b *testing.B, s backend.Durable, keys [][]byte)) {
		b.Run(name, func(b *testing.B) {
			for _, config := range configs {
				label := config
				if label == "" {
					label = "default"
				}
				b.Run(label, func(b *testing.B) {
					s, keys := benchStore(b, d, config)
					b.ReportAllocs()
					b.ResetTimer()
					fn(b, s, keys)
				})
			}
		})
	}
	run("GetPut", configs, benchGetPut)
	run("GetPutParallel", configs, benchGetPutParallel)
	run("WriteBatch1000", []string{""}, benchWriteBatch1000)
	run("WriteBatchSync", []string{""}, benchWriteBatchSync)
}

// benchStore opens a store in config in a temporary directory holding
// benchKeys records of 17 bytes and returns it with its keys.
func benchStore(b *testing.B, d Durable, config string) (backend.Durable, [][]byte) {
	b.Helper()
	s := openConfig(b, d, b.TempDir(), config)
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

func benchGetPut(b *testing.B, s backend.Durable, keys [][]byte) {
	r := rand.New(rand.NewPCG(1, 2))
	value := make([]byte, 17)
	now := t0 - int64(time.Hour)
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

func benchGetPutParallel(b *testing.B, s backend.Durable, keys [][]byte) {
	now := t0 - int64(time.Hour)
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

func benchWriteBatch1000(b *testing.B, s backend.Durable, keys [][]byte) {
	writes := make([]backend.Write, 1000)
	value := make([]byte, 17)
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

func benchWriteBatchSync(b *testing.B, s backend.Durable, keys [][]byte) {
	value := make([]byte, 17)
	writes := make([]backend.Write, 1)
	i := 0
	for b.Loop() {
		writes[0] = backend.Write{Key: keys[i%len(keys)], Value: value, ExpiresAt: t0}
		i++
		if err := s.WriteBatch(writes, true); err != nil {
			b.Fatal(err)
		}
	}
}
