package bench

// The durable-state workloads: Sluice's engine over Pebble and bbolt, with
// its in-memory tier, against the same engine over the memory backend, and
// the raw stores' own costs as a floor. Every store lives in a real
// directory on the machine's disk (b.TempDir, or os.TempDir for ColdStart)
// and every engine reads the system clock.
//
//   - DurableHotKey/<store>-<mode>-<algorithm>: one key from one goroutine,
//     every call allowed (Unlimited), in Interval and Sync mode, and
//     memory-<algorithm> for the ratio.
//   - DurableKeys100k: 100,000 keys in turn, Interval mode only. Sync mode
//     is left out: with one caller every call waits for its own fsync
//     whatever the number of keys, which DurableHotKey's sync rows measure
//     already, and warming 100,000 keys would cost 100,000 fsyncs per run.
//   - DurableParallel: b.RunParallel over 10,000 keys, Interval mode.
//   - SyncConcurrency/<store>/callers-<n>: Sync mode, n goroutines each on
//     its own keys, sharing b.N between them, reporting decisions/s (and
//     decisions/commit, the size of the group commits).
//   - RawStore/<store>: the store alone, Get then Put of one of 100,000
//     keys in turn; RawStoreBatch/<store>: WriteBatch of 1000 records, cost
//     per record as ns/key. bolt-nosync is bbolt without fsync on commit.
//   - ColdStart/<store>: open a store holding 1,000,000 token-bucket
//     records, engine.New, first decision on one of them; ns/op is the
//     time to that first decision (ns/open, the store's Open, is part of
//     it). Closing is timed apart (ns/close).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/engine"
)

// durableStores are the stores the engine runs over in the durable
// workloads.
var durableStores = []string{StorePebble, StoreBolt}

// durableAlgos are the algorithms of the durable workloads.
var durableAlgos = []algo.Name{algo.TokenBucketName, algo.GCRAName}

// durableImpl is one engine configuration of a durable workload.
type durableImpl struct {
	name string
	new  func(b *testing.B) (*Sluice, error)
}

// durableImpls returns the memory-<algorithm> references, then
// <store>-<mode>-<algorithm> for every store and mode given, all at
// Unlimited.
func durableImpls(modes ...engine.Durability) []durableImpl {
	var out []durableImpl
	for _, a := range durableAlgos {
		out = append(out, durableImpl{"memory-" + string(a), func(*testing.B) (*Sluice, error) {
			return NewSluice(a, Unlimited, nil, nil)
		}})
	}
	for _, store := range durableStores {
		for _, mode := range modes {
			for _, a := range durableAlgos {
				out = append(out, durableImpl{store + "-" + mode.String() + "-" + string(a), func(b *testing.B) (*Sluice, error) {
					return NewDurableSluice(store, b.TempDir(), mode, a, Unlimited)
				}})
			}
		}
	}
	return out
}

// openDurable builds im for one run and closes it, checking the close's
// final flush, when the run ends.
func openDurable(b *testing.B, im durableImpl) *Sluice {
	b.Helper()
	s, err := im.new(b)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := s.CloseErr(); err != nil {
			b.Error(err)
		}
	})
	return s
}

// warmDurable warms keys as warm does, then flushes, so that the run does
// not pay for writing the warm-up's records.
func warmDurable(b *testing.B, s *Sluice, keys []string) {
	b.Helper()
	warm(b, s, keys)
	if err := s.Flush(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDurableHotKey: one key from one goroutine, every call allowed,
// over each store in each mode. In Interval mode the key's record is
// stepped in the in-memory tier and written back every 50 ms; in Sync mode
// every call waits for its record to be fsynced.
func BenchmarkDurableHotKey(b *testing.B) {
	for _, im := range durableImpls(engine.Interval, engine.Sync) {
		b.Run(im.name, func(b *testing.B) {
			s := openDurable(b, im)
			warmDurable(b, s, hotKey)
			runKeys(b, s, hotKey, true)
		})
	}
}

// BenchmarkDurableKeys100k: 100,000 keys in turn from one goroutine, every
// call allowed, Interval mode. Every flush interval nearly every key is
// dirty again, so the flushes (and the MaxDirty backpressure, 65,536
// records, that makes a caller flush) are part of the cost.
func BenchmarkDurableKeys100k(b *testing.B) {
	keys := Keys(100_000)
	for _, im := range durableImpls(engine.Interval) {
		b.Run(im.name, func(b *testing.B) {
			s := openDurable(b, im)
			warmDurable(b, s, keys)
			runKeys(b, s, keys, true)
		})
	}
}

// BenchmarkDurableParallel: b.RunParallel over 10,000 keys, each goroutine
// walking them from its own offset, every call allowed, Interval mode.
func BenchmarkDurableParallel(b *testing.B) {
	keys := Keys(10_000)
	for _, im := range durableImpls(engine.Interval) {
		b.Run(im.name, func(b *testing.B) {
			s := openDurable(b, im)
			warmDurable(b, s, keys)
			var goroutines, denied atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(goroutines.Add(1)-1) * 2503 % len(keys)
				n := int64(0)
				for pb.Next() {
					ok, err := s.Allow(keys[i])
					if err != nil {
						b.Error(err)
						return
					}
					if !ok {
						n++
					}
					if i++; i == len(keys) {
						i = 0
					}
				}
				denied.Add(n)
			})
			if n := denied.Load(); n > 0 {
				b.Fatalf("%d of %d calls denied; this workload measures the allowed path", n, b.N)
			}
		})
	}
}

// keysPerCaller is the number of keys each goroutine of SyncConcurrency
// walks.
const keysPerCaller = 16

// syncCallers is the number of concurrent callers SyncConcurrency runs.
var syncCallers = []int{1, 8, 64}

// callers makes total calls on s from n goroutines, goroutine g walking its
// own keys keys[g*k:(g+1)*k] (k = len(keys)/n) in turn, the calls shared as
// evenly as they divide. It returns the number of denials and the first
// error.
func callers(s *Sluice, keys []string, n, total int) (int64, error) {
	var (
		wg      sync.WaitGroup
		denied  atomic.Int64
		errOnce sync.Once
		first   error
	)
	k := len(keys) / n
	for g := range n {
		calls := total / n
		if g < total%n {
			calls++
		}
		mine := keys[g*k : (g+1)*k]
		wg.Go(func() {
			j := 0
			for range calls {
				ok, err := s.Allow(mine[j])
				if err != nil {
					errOnce.Do(func() { first = err })
					return
				}
				if !ok {
					denied.Add(1)
				}
				if j++; j == len(mine) {
					j = 0
				}
			}
		})
	}
	wg.Wait()
	return denied.Load(), first
}

// BenchmarkSyncConcurrency: Sync mode, token bucket, with 1, 8 and 64
// goroutines each deciding on its own 16 keys; b.N is shared between them.
// Every decision returns only once its record is fsynced; concurrent
// callers share one commit, so decisions/s should grow with the callers.
// decisions/commit is the mean number of decisions one commit carried.
func BenchmarkSyncConcurrency(b *testing.B) {
	for _, store := range durableStores {
		b.Run(store, func(b *testing.B) {
			for _, n := range syncCallers {
				b.Run(fmt.Sprintf("callers-%d", n), func(b *testing.B) {
					s := openDurable(b, durableImpl{new: func(b *testing.B) (*Sluice, error) {
						return NewDurableSluice(store, b.TempDir(), engine.Sync, algo.TokenBucketName, Unlimited)
					}})
					keys := Keys(n * keysPerCaller)
					// Warm every key, concurrently so that the warm-up
					// is group-committed too.
					if denied, err := callers(s, keys, n, len(keys)); err != nil || denied > 0 {
						b.Fatalf("warming: %d denied, error %v", denied, err)
					}
					before := s.e.Stats().Commits
					b.ReportAllocs()
					b.ResetTimer()
					denied, err := callers(s, keys, n, b.N)
					b.StopTimer()
					if err != nil {
						b.Fatal(err)
					}
					if denied > 0 {
						b.Fatalf("%d of %d calls denied; this workload measures the allowed path", denied, b.N)
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
					if commits := s.e.Stats().Commits - before; commits > 0 {
						b.ReportMetric(float64(b.N)/float64(commits), "decisions/commit")
					}
				})
			}
		})
	}
}

// rawStores are the stores the raw-store floor measures: bolt-nosync in
// addition, because bbolt's default Put is a synced transaction.
var rawStores = []string{StorePebble, StoreBolt, StoreBoltNoSync}

// rawKeys is the key space of the raw-store benchmarks.
const rawKeys = 100_000

// rawValue is a record of a token bucket's size.
var rawValue = make([]byte, 17)

// rawStore opens the named store in a temporary directory holding rawKeys
// records of 17 bytes under the engine's namespaced keys, expiring in an
// hour, and returns it with its keys and the time it was filled.
func rawStore(b *testing.B, name string) (backend.Durable, [][]byte, int64) {
	b.Helper()
	s, err := OpenStore(name, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := s.Close(); err != nil {
			b.Error(err)
		}
	})
	now := engine.SystemClock{}.Now()
	keys := make([][]byte, rawKeys)
	writes := make([]backend.Write, 0, 10_000)
	for i, k := range Keys(rawKeys) {
		keys[i] = engine.AppendKey(nil, "bench", k)
		writes = append(writes, backend.Write{Key: keys[i], Value: rawValue, ExpiresAt: now + int64(time.Hour)})
		if len(writes) == cap(writes) {
			if err := s.WriteBatch(writes, false); err != nil {
				b.Fatal(err)
			}
			writes = writes[:0]
		}
	}
	return s, keys, now
}

// BenchmarkRawStore: the store alone, the engine's read-modify-write
// without the engine: Get one of 100,000 records in turn, then Put 17
// bytes back. pebble's Put is not synced; bolt's is (one synced
// transaction per Put, bbolt's default); bolt-nosync's is not.
func BenchmarkRawStore(b *testing.B) {
	for _, name := range rawStores {
		b.Run(name, func(b *testing.B) {
			s, keys, now := rawStore(b, name)
			exp := now + int64(time.Hour)
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				k := keys[i]
				v, err := s.Get(k, now)
				if err != nil {
					b.Fatal(err)
				}
				if v == nil {
					b.Fatalf("key %q: no record", k)
				}
				if err := s.Put(k, rawValue, exp); err != nil {
					b.Fatal(err)
				}
				if i++; i == len(keys) {
					i = 0
				}
			}
		})
	}
}

// BenchmarkRawStoreBatch: WriteBatch of 1000 records of 17 bytes (sync
// false, as the Interval flush writes), over the 100,000 keys in turn;
// ns/key is the cost per record. pebble syncs every batch whatever it is
// asked; bolt syncs every commit; bolt-nosync does not sync.
func BenchmarkRawStoreBatch(b *testing.B) {
	for _, name := range rawStores {
		b.Run(name, func(b *testing.B) {
			s, keys, now := rawStore(b, name)
			exp := now + int64(time.Hour)
			writes := make([]backend.Write, 1000)
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				for i := range writes {
					writes[i] = backend.Write{Key: keys[n%len(keys)], Value: rawValue, ExpiresAt: exp}
					n++
				}
				if err := s.WriteBatch(writes, false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/key")
		})
	}
}

// coldRecords is the number of records ColdStart's stores hold.
const coldRecords = MaxKeys

// coldMaxKeys is the most keys the engine may hold in memory after its
// first decision on a store it has just opened: a handful, not the store.
const coldMaxKeys = 8

// coldParams are the token bucket's parameters in ColdStart's records: a
// thousand per ten years, so a record written during setup, with one unit
// spent, lives for 3.65 days and refills nothing measurable before the
// benchmark reads it.
var coldParams = algo.Params{Limit: 1000, Window: algo.MaxWindow}

// coldStore is one ColdStart store, written once per process.
type coldStore struct {
	once  sync.Once
	dir   string
	setup time.Duration
	err   error
	next  atomic.Int64 // counts the keys used, so no key is decided twice
}

// coldStores are ColdStart's stores by name. removeColdStores (from
// TestMain) deletes their directories.
var coldStores = map[string]*coldStore{StorePebble: {}, StoreBolt: {}}

// removeColdStores deletes the directories ColdStart wrote, with any copy
// a failed iteration left.
func removeColdStores() {
	for _, c := range coldStores {
		if c.dir == "" {
			continue
		}
		os.RemoveAll(c.dir)
		runs, _ := filepath.Glob(c.dir + "-run-*")
		for _, r := range runs {
			os.RemoveAll(r)
		}
	}
}

// build writes coldRecords records into a new directory under os.TempDir:
// for every key of Keys, a token-bucket record with one unit spent, made by
// algo Step, under the engine's namespaced key, in batches of 10,000 written
// with WriteBatch straight to the store, which is then closed.
func (c *coldStore) build(name string) {
	start := time.Now()
	dir, err := os.MkdirTemp("", "sluice-bench-coldstart-"+name+"-")
	if err != nil {
		c.err = err
		return
	}
	c.dir = dir
	s, err := OpenStore(name, dir)
	if err != nil {
		c.err = err
		return
	}
	a := algo.MustNew(algo.TokenBucketName, coldParams)
	const chunk = 10_000
	writes := make([]backend.Write, 0, chunk)
	var kbuf []byte
	for _, k := range Keys(coldRecords) {
		if len(writes) == 0 {
			kbuf = make([]byte, 0, chunk*32) // one buffer per batch for its keys
		}
		now := engine.SystemClock{}.Now()
		rec, d := a.Step(nil, now, 1)
		if !d.Allowed || rec == nil {
			c.err = fmt.Errorf("setup: first step denied: %+v", d)
			s.Close()
			return
		}
		off := len(kbuf)
		kbuf = engine.AppendKey(kbuf, "bench", k)
		writes = append(writes, backend.Write{Key: kbuf[off:len(kbuf):len(kbuf)], Value: rec, ExpiresAt: now + int64(d.TTL)})
		if len(writes) == chunk {
			if err := s.WriteBatch(writes, false); err != nil {
				c.err = err
				s.Close()
				return
			}
			writes = writes[:0]
		}
	}
	if len(writes) > 0 {
		if err := s.WriteBatch(writes, false); err != nil {
			c.err = err
			s.Close()
			return
		}
	}
	c.err = s.Close()
	c.setup = time.Since(start)
}

// instance returns the directory one ColdStart iteration opens. Pebble's
// is a fresh copy of the store written during setup: its table files
// hard-linked (Pebble never changes a table file, it only deletes it), its
// other files (log, manifest, options) copied. Without it every restart
// would leave Pebble one more level-0 table (the replayed log, flushed on
// open) and a longer manifest for the next, and the time to first
// decision would drift up run after run (4 to 10 ms instead of 2 here).
// bbolt's store is used in place: a restart changes one record of it.
func (c *coldStore) instance(name string) (string, error) {
	if name != StorePebble {
		return c.dir, nil
	}
	dst, err := os.MkdirTemp(filepath.Dir(c.dir), filepath.Base(c.dir)+"-run-")
	if err != nil {
		return "", err
	}
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		src, to := filepath.Join(c.dir, e.Name()), filepath.Join(dst, e.Name())
		switch {
		case !e.Type().IsRegular():
			return "", fmt.Errorf("cloning %s: %s is not a regular file", c.dir, e.Name())
		case strings.HasSuffix(e.Name(), ".sst"):
			err = os.Link(src, to)
		default:
			err = copyFile(src, to)
		}
		if err != nil {
			return "", err
		}
	}
	return dst, nil
}

// copyFile copies the regular file src to a new file dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// BenchmarkColdStart: the time from nothing to the first decision on a
// store of 1,000,000 records: open the store, engine.New (Interval mode,
// defaults), and Apply on one record already on disk. ns/op is that time;
// closing the engine (its final flush and the store's close) is timed
// apart as ns/close. The store is written once per process (s/setup is how
// long that took) and is in the OS page cache, so this is a restart's
// cost, not a cold disk's; every iteration of Pebble starts from the store
// as setup left it (see instance). Each decision is on a key not decided
// before, and it must see the record written during setup (one unit spent
// already), and leave at most coldMaxKeys keys in the engine's memory.
func BenchmarkColdStart(b *testing.B) {
	keys := Keys(coldRecords)
	a := algo.MustNew(algo.TokenBucketName, coldParams)
	l := engine.Limit{Namespace: "bench", Algorithm: a}
	for _, name := range durableStores {
		b.Run(name, func(b *testing.B) {
			c := coldStores[name]
			b.StopTimer()
			c.once.Do(func() { c.build(name) })
			if c.err != nil {
				b.Fatalf("setup: %v", c.err)
			}
			var opening, closing time.Duration
			maxLen := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// 7919 is prime to 1,000,000: no key comes twice.
				key := keys[c.next.Add(1)*7919%coldRecords]
				dir, err := c.instance(name)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				s, err := OpenStore(name, dir)
				if err != nil {
					b.Fatal(err)
				}
				opening += time.Since(start)
				e, err := engine.New(s, nil)
				if err != nil {
					b.Fatal(err)
				}
				d, err := e.Apply(context.Background(), l, key, 1)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if want := coldParams.Limit - 2; !d.Allowed || d.Remaining != want {
					b.Fatalf("key %s: allowed %v, remaining %d; want allowed with %d remaining (the record written during setup, one more spent)",
						key, d.Allowed, d.Remaining, want)
				}
				n := e.Len()
				maxLen = max(maxLen, n)
				if n > coldMaxKeys {
					b.Fatalf("the engine holds %d keys in memory after its first decision; it must load only what it uses", n)
				}
				start = time.Now()
				if err := e.Close(); err != nil && !errors.Is(err, engine.ErrClosed) {
					b.Fatal(err)
				}
				closing += time.Since(start)
				if dir != c.dir {
					if err := os.RemoveAll(dir); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(opening.Nanoseconds())/float64(b.N), "ns/open")
			b.ReportMetric(float64(closing.Nanoseconds())/float64(b.N), "ns/close")
			b.ReportMetric(float64(maxLen), "keys-in-memory")
			b.ReportMetric(float64(coldRecords), "records")
			b.ReportMetric(c.setup.Seconds(), "s/setup")
		})
	}
}
