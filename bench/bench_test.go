package bench

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// TestMain prints, before the benchmarks' own header, the configuration
// lines benchstat keeps and cmd/report puts at the top of RESULTS.md. None
// of them changes between runs on one machine: benchstat would otherwise
// tell apart runs concatenated into one file.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" && f.Value.String() != "^$" {
		fmt.Printf("go: %s\n", runtime.Version())
		fmt.Printf("cores: %d\n", runtime.NumCPU())
		fmt.Printf("gomaxprocs: %d\n", runtime.GOMAXPROCS(0))
	}
	code := m.Run()
	removeColdStores() // ColdStart's stores, written under os.TempDir
	os.Exit(code)
}

// t0 is the benchmarks' fixed time, a whole second.
const t0 = int64(1_700_000_000) * int64(time.Second)

// stepCases configure BenchmarkStep per algorithm: the parameters, and how
// far the clock moves before each step so that every step is allowed. The
// buckets move by one emission interval, so they refill exactly what each
// step spends; the windows by two, so they run at half their limit and the
// sliding counter's estimate never reaches it. The sliding log gets a small
// limit, as it is meant for, so its record holds about five entries.
var stepCases = []struct {
	name    algo.Name
	params  algo.Params
	advance time.Duration
}{
	{algo.TokenBucketName, algo.Params{Limit: 100, Window: time.Second}, 10 * time.Millisecond},
	{algo.GCRAName, algo.Params{Limit: 100, Window: time.Second}, 10 * time.Millisecond},
	{algo.LeakyBucketName, algo.Params{Limit: 100, Window: time.Second}, 10 * time.Millisecond},
	{algo.FixedWindowName, algo.Params{Limit: 100, Window: time.Second}, 20 * time.Millisecond},
	{algo.SlidingCounterName, algo.Params{Limit: 100, Window: time.Second}, 20 * time.Millisecond},
	{algo.SlidingLogName, algo.Params{Limit: 10, Window: time.Second}, 200 * time.Millisecond},
}

// BenchmarkStep measures algo.Step alone on the allowed path, the record
// stepped in place as the engine does over the memory backend.
func BenchmarkStep(b *testing.B) {
	for _, c := range stepCases {
		b.Run(string(c.name), func(b *testing.B) {
			a := algo.MustNew(c.name, c.params)
			now := t0
			state, _ := a.Step(nil, now, 1)
			denied := 0
			b.ReportAllocs()
			for b.Loop() {
				now += int64(c.advance)
				next, d := a.Step(state, now, 1)
				if next != nil {
					state = next
				}
				if !d.Allowed {
					denied++
				}
			}
			if denied > 0 {
				b.Fatalf("%d of %d steps denied; this benchmark measures the allowed path", denied, b.N)
			}
		})
	}
}

// BenchmarkStepDenied measures algo.Step on an exhausted record at a clock
// that does not move: every step is denied and changes nothing.
func BenchmarkStepDenied(b *testing.B) {
	for _, c := range stepCases {
		b.Run(string(c.name), func(b *testing.B) {
			a := algo.MustNew(c.name, algo.Params{Limit: Exhausted.Limit, Window: Exhausted.Window})
			state, _ := a.Step(nil, t0, 1)
			allowed := 0
			b.ReportAllocs()
			for b.Loop() {
				if _, d := a.Step(state, t0, 1); d.Allowed {
					allowed++
				}
			}
			if allowed > 0 {
				b.Fatalf("%d of %d steps allowed; this benchmark measures the denied path", allowed, b.N)
			}
		})
	}
}

// impl is one implementation under test, built fresh for each run.
type impl struct {
	name string
	new  func() (Limiter, error)
}

// sluiceOrder lists the algorithms with the two the targets are about first.
var sluiceOrder = []algo.Name{
	algo.TokenBucketName, algo.GCRAName, algo.LeakyBucketName,
	algo.FixedWindowName, algo.SlidingCounterName, algo.SlidingLogName,
}

// workload says which implementations a workload runs.
type workload struct {
	rate      Rate
	fakeClock bool            // add sluice-token_bucket-fakeclock
	floor     bool            // add floor-stripedmap, which always allows
	mem       *memory.Options // the memory backend's options; nil means defaults
	single    bool            // add floor-uberratelimit: one key, allowed path only
	variants  bool            // add the opt-in Variants of variantAlgorithms
}

// variantAlgorithms are the algorithms whose opt-in Variants run beside
// their default: the two the targets are about.
var variantAlgorithms = []algo.Name{algo.TokenBucketName, algo.GCRAName}

// impls returns the implementations of a workload, every one limited at
// w.rate (the sliding log at SlidingLogUnlimited where w.rate is beyond its
// limits).
func impls(w workload) []impl {
	var out []impl
	for _, name := range sluiceOrder {
		r := w.rate
		if name == algo.SlidingLogName && r.Limit > algo.MaxSlidingLogLimit {
			r = SlidingLogUnlimited
		}
		out = append(out, impl{"sluice-" + string(name), func() (Limiter, error) { return NewSluice(name, r, nil, w.mem) }})
	}
	if w.variants {
		for _, name := range variantAlgorithms {
			for _, v := range Variants[1:] {
				out = append(out, impl{"sluice-" + string(name) + v.Suffix(), func() (Limiter, error) {
					return NewSluiceVariant(name, w.rate, v, w.mem)
				}})
			}
		}
	}
	if w.fakeClock {
		out = append(out, impl{"sluice-token_bucket-fakeclock", func() (Limiter, error) {
			return NewSluice(algo.TokenBucketName, w.rate, FixedClock(t0), w.mem)
		}})
	}
	out = append(out,
		impl{"xtimerate", func() (Limiter, error) { return NewXTimeRate(w.rate), nil }},
		impl{"golimiter", func() (Limiter, error) { return NewGoLimiter(w.rate) }},
		impl{"ulule", func() (Limiter, error) { return NewUlule(w.rate) }},
		impl{"throttled", func() (Limiter, error) { return NewThrottled(w.rate, nil) }},
		impl{"httprate", func() (Limiter, error) { return NewHTTPRate(w.rate, nil) }},
		impl{"tollbooth", func() (Limiter, error) { return NewTollbooth(w.rate) }},
	)
	if w.floor {
		out = append(out, impl{"floor-stripedmap", func() (Limiter, error) { return NewStripedMap(), nil }})
	}
	if w.single {
		// go.uber.org/ratelimit is one unkeyed limiter that blocks
		// instead of denying: a floor for a single limiter's allowed
		// path, at a billion a second so that Take never sleeps.
		out = append(out, impl{"floor-uberratelimit", func() (Limiter, error) { return NewUberRateLimit(1_000_000_000) }})
	}
	return out
}

// open builds im for one run and closes it when the run ends. It first
// collects the garbage earlier runs left (peers without a Close leave whole
// key maps behind), so that no run pays for another's collection.
func open(b *testing.B, im impl) Limiter {
	b.Helper()
	runtime.GC()
	l, err := im.new()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	return l
}

// warm makes one allowed call per key, so that the run measures keys that
// exist rather than their creation. It passes a copy of each key, as a
// server passes a key it has just read from a request: an implementation
// that keeps the caller's string then holds a copy, and a lookup compares
// the key's bytes instead of finding, by its pointer, the very string it
// stored (Go's string comparison returns early on equal pointers).
func warm(b *testing.B, l Limiter, keys []string) {
	b.Helper()
	for _, k := range keys {
		if ok, err := l.Allow(strings.Clone(k)); err != nil || !ok {
			b.Fatalf("warming %q: allowed %v, error %v", k, ok, err)
		}
	}
	runtime.GC() // the copies, and whatever the warming left, before the timer starts
}

// prepared returns keys prepared by l when l is a KeyPreparer to be called
// through AllowKey, else nil. The keys are prepared before the timer starts,
// as a caller prepares a key once and decides it many times, and in the
// order they were created (Keys' order, which sorts them), whatever the order
// they are then decided in, as a server prepares a caller's key when it first
// sees the caller. Prepared in the walk's order, each prepared key's bytes
// would lie where the walk goes next, and the hardware prefetcher would
// bring them in: a shuffled walk would then measure the prepared rows on
// keys laid out for it and every other row on keys laid out at random.
func prepared(l Limiter, keys []string) (KeyPreparer, []engine.Key) {
	p, ok := l.(KeyPreparer)
	if !ok || !p.Prepared() {
		return nil, nil
	}
	byKey := make(map[string]engine.Key, len(keys))
	for _, k := range slices.Sorted(slices.Values(keys)) {
		byKey[k] = p.Prepare(k)
	}
	ks := make([]engine.Key, len(keys))
	for i, k := range keys {
		ks[i] = byKey[k]
	}
	return p, ks
}

// runKeys calls Allow for keys in turn, starting over at the end, and fails
// unless every call answered wantAllowed. A KeyPreparer that asks for it is
// called through AllowKey with the keys prepared.
func runKeys(b *testing.B, l Limiter, keys []string, wantAllowed bool) {
	b.Helper()
	if p, ks := prepared(l, keys); p != nil {
		runPrepared(b, p, ks, wantAllowed)
		return
	}
	wrong, i := 0, 0
	b.ReportAllocs()
	for b.Loop() {
		ok, err := l.Allow(keys[i])
		if err != nil {
			b.Fatal(err)
		}
		if ok != wantAllowed {
			wrong++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	if wrong > 0 {
		b.Fatalf("%d of %d calls answered allowed=%v; this workload measures allowed=%v", wrong, b.N, !wantAllowed, wantAllowed)
	}
}

// hotKey is the key of the single-key workloads, 20 bytes like the others.
var hotKey = []string{"user-000000000000042"}

// runPrepared is runKeys for prepared keys.
func runPrepared(b *testing.B, p KeyPreparer, keys []engine.Key, wantAllowed bool) {
	b.Helper()
	wrong, i := 0, 0
	b.ReportAllocs()
	for b.Loop() {
		ok, err := p.AllowKey(&keys[i])
		if err != nil {
			b.Fatal(err)
		}
		if ok != wantAllowed {
			wrong++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	if wrong > 0 {
		b.Fatalf("%d of %d calls answered allowed=%v; this workload measures allowed=%v", wrong, b.N, !wantAllowed, wantAllowed)
	}
}

// BenchmarkHotKey: one key from one goroutine, every call allowed. The
// budget is Unlimited: a billion units refilling over ten years, so no run
// can spend it and the key's record stays live, stepped in place.
func BenchmarkHotKey(b *testing.B) {
	for _, im := range impls(workload{rate: Unlimited, fakeClock: true, floor: true, single: true, variants: true}) {
		b.Run(im.name, func(b *testing.B) {
			l := open(b, im)
			warm(b, l, hotKey)
			runKeys(b, l, hotKey, true)
		})
	}
}

// BenchmarkHotKeyDenied: one key that has spent its one call an hour, every
// call denied.
func BenchmarkHotKeyDenied(b *testing.B) {
	for _, im := range impls(workload{rate: Exhausted, fakeClock: true, variants: true}) {
		b.Run(im.name, func(b *testing.B) {
			l := open(b, im)
			warm(b, l, hotKey)
			runKeys(b, l, hotKey, false)
		})
	}
}

// BenchmarkKeys100k: 100,000 distinct keys in turn from one goroutine, every
// call allowed, every key created before the run.
func BenchmarkKeys100k(b *testing.B) {
	keys := Keys(100_000)
	for _, im := range impls(workload{rate: Unlimited, fakeClock: true, floor: true, variants: true}) {
		b.Run(im.name, func(b *testing.B) {
			l := open(b, im)
			warm(b, l, keys)
			runKeys(b, l, keys, true)
		})
	}
}

// BenchmarkKeys100kDenied: Keys100k with every key exhausted, every call
// denied: a limiter under attack mostly denies.
func BenchmarkKeys100kDenied(b *testing.B) {
	keys := Keys(100_000)
	for _, im := range impls(workload{rate: Exhausted, fakeClock: true, variants: true}) {
		b.Run(im.name, func(b *testing.B) {
			l := open(b, im)
			warm(b, l, keys)
			runKeys(b, l, keys, false)
		})
	}
}

// BenchmarkKeys100kShuffled is Keys100k with the keys decided in a fixed
// random order (one shuffle, seeded) rather than the order they were
// created in: traffic from many callers arrives in no order, while walking
// the keys in their creation order lets a limiter that keeps a heap object
// per key find the next one where the hardware prefetcher has already
// brought it.
func BenchmarkKeys100kShuffled(b *testing.B) {
	keys := Shuffled(Keys(100_000))
	for _, im := range impls(workload{rate: Unlimited, fakeClock: true, floor: true, variants: true}) {
		b.Run(im.name, func(b *testing.B) {
			l := open(b, im)
			warm(b, l, Keys(100_000))
			runKeys(b, l, keys, true)
		})
	}
}

// BenchmarkKeys100kShuffledDenied is Keys100kShuffled with every key
// exhausted, every call denied.
func BenchmarkKeys100kShuffledDenied(b *testing.B) {
	keys := Shuffled(Keys(100_000))
	for _, im := range impls(workload{rate: Exhausted, fakeClock: true, variants: true}) {
		b.Run(im.name, func(b *testing.B) {
			l := open(b, im)
			warm(b, l, Keys(100_000))
			runKeys(b, l, keys, false)
		})
	}
}

// BenchmarkKeys100kRefilled is Keys100k at a billion units a second: each
// key's bucket is full again long before its next call, so Sluice finds its
// record expired and starts the key afresh, as it does for every request of
// a user who stays under the limit. The peers keep no expiry and take their
// usual path. There is no fakeclock variant: a clock that never moves never
// refills.
func BenchmarkKeys100kRefilled(b *testing.B) {
	keys := Keys(100_000)
	for _, im := range impls(workload{rate: Refilling, floor: true}) {
		b.Run(im.name, func(b *testing.B) {
			l := open(b, im)
			warm(b, l, keys)
			runKeys(b, l, keys, true)
		})
	}
}

// BenchmarkParallel10k: b.RunParallel over 10,000 keys, each goroutine
// walking them from its own offset in the order they were created, every
// call allowed.
func BenchmarkParallel10k(b *testing.B) {
	benchParallel(b, Keys(10_000), Keys(10_000), workload{rate: Unlimited, fakeClock: true, floor: true, variants: true}, true)
}

// BenchmarkParallel10kDenied: Parallel10k with every key exhausted, every
// call denied.
func BenchmarkParallel10kDenied(b *testing.B) {
	benchParallel(b, Keys(10_000), Keys(10_000), workload{rate: Exhausted, fakeClock: true, variants: true}, false)
}

// BenchmarkParallel10kShuffled is Parallel10k with the keys created in
// one order and decided in a fixed random order (the same for every
// implementation), as callers' requests arrive, as Keys100kShuffled does:
// each limiter's records then lie in memory in an order unrelated to the
// walk, as they do in a server. Parallel10k walks a limiter that
// allocates one heap object per key (x/time/rate) in the order the objects
// were allocated, which the hardware prefetcher follows (see PARALLEL.md).
func BenchmarkParallel10kShuffled(b *testing.B) {
	benchParallel(b, Keys(10_000), Shuffled(Keys(10_000)), workload{rate: Unlimited, fakeClock: true, floor: true, variants: true}, true)
}

// BenchmarkParallel10kShuffledDenied is Parallel10kShuffled with every key
// exhausted, every call denied.
func BenchmarkParallel10kShuffledDenied(b *testing.B) {
	benchParallel(b, Keys(10_000), Shuffled(Keys(10_000)), workload{rate: Exhausted, fakeClock: true, variants: true}, false)
}

// benchParallel runs every implementation of w: made is warmed in its
// order, creating the keys, then walk is decided with runParallel.
func benchParallel(b *testing.B, made, walk []string, w workload, wantAllowed bool) {
	for _, im := range impls(w) {
		b.Run(im.name, func(b *testing.B) {
			l := open(b, im)
			warm(b, l, made)
			runParallel(b, l, walk, wantAllowed)
		})
	}
}

// BenchmarkLineTransfer is the floor under every parallel workload on the
// machine it runs on: one atomic add per call on one of 10,000 cache lines,
// each goroutine walking them from its own offset as runParallel does, so
// that every line was last written by the other core. In order, the lines
// are walked in the order they lie in memory (as Parallel10k walks
// x/time/rate's limiters, allocated in key order); random, in an order
// unrelated to it (as a hash table places records). The difference is
// what a layout in walk order saves the hardware prefetchers; the random
// figure is the least a decision that writes one record placed by a hash
// can cost on this machine.
func BenchmarkLineTransfer(b *testing.B) {
	type line struct {
		v atomic.Uint64
		_ [56]byte
	}
	const n = 10_000
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	random := slices.Clone(order)
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { random[i], random[j] = random[j], random[i] })
	for _, c := range []struct {
		name string
		walk []int
	}{{"in-order", order}, {"random", random}} {
		b.Run(c.name, func(b *testing.B) {
			lines := make([]line, n)
			var goroutines atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := int(goroutines.Add(1)-1) * 2503 % n
				for pb.Next() {
					lines[c.walk[i]].v.Add(1)
					if i++; i == n {
						i = 0
					}
				}
			})
		})
	}
}

// runParallel calls Allow under b.RunParallel, each goroutine walking keys
// from its own offset, and fails unless every call answered wantAllowed.
func runParallel(b *testing.B, l Limiter, keys []string, wantAllowed bool) {
	b.Helper()
	var goroutines, wrong atomic.Int64
	p, ks := prepared(l, keys)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// Offsets a prime apart, so the goroutines work on different keys
		// and different stripes.
		i := int(goroutines.Add(1)-1) * 2503 % len(keys)
		n := int64(0)
		for pb.Next() {
			var ok bool
			var err error
			if p != nil {
				ok, err = p.AllowKey(&ks[i])
			} else {
				ok, err = l.Allow(keys[i])
			}
			if err != nil {
				b.Error(err)
				return
			}
			if ok != wantAllowed {
				n++
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
		wrong.Add(n)
	})
	if n := wrong.Load(); n > 0 {
		b.Fatalf("%d of %d calls answered allowed=%v; this workload measures allowed=%v", n, b.N, !wantAllowed, wantAllowed)
	}
}

// BenchmarkBytesPerKey reports, as B/key, the heap retained per key after
// one allowed call for each of 1,000,000 distinct 20-byte keys at a typical
// ten an hour, and as ns/insert the time one new key took. It measures once,
// before its timed loop, which is empty: its ns/op means nothing.
//
// Each key is passed as a fresh copy, as a server passes a key it has just
// read from a request, so an implementation that keeps the caller's string
// pays for it. Sluice's memory backend runs without its sweeper here; no
// record expires during the measurement either way, but a fixed window
// aligned to the hour might.
func BenchmarkBytesPerKey(b *testing.B) {
	keys := Keys(MaxKeys)
	for _, im := range impls(workload{rate: Typical, floor: true, mem: &memory.Options{SweepInterval: -1}}) {
		b.Run(im.name, func(b *testing.B) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&before)

			l, err := im.new()
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			for _, k := range keys {
				if ok, err := l.Allow(strings.Clone(k)); err != nil || !ok {
					b.Fatalf("inserting %q: allowed %v, error %v", k, ok, err)
				}
			}
			insert := time.Since(start)

			runtime.GC()
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(l)
			if s, ok := l.(*Sluice); ok && s.Len() != len(keys) {
				b.Fatalf("the store holds %d keys, want %d", s.Len(), len(keys))
			}
			l.Close()

			b.ReportAllocs()
			for b.Loop() {
			}
			b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/float64(len(keys)), "B/key")
			b.ReportMetric(float64(insert.Nanoseconds())/float64(len(keys)), "ns/insert")
		})
	}
}
