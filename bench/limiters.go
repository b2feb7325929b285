package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/bolt"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/engine"
)

// Limiter is the one operation every implementation is measured on. All
// implementations are safe for concurrent use.
type Limiter interface {
	// Allow spends one unit of key's budget and reports whether the
	// request was allowed. An error is an implementation failure, never a
	// denial.
	Allow(key string) (bool, error)
	// Close releases the limiter and stops its background goroutines.
	Close()
}

// Rate is a limit of Limit units per Window, with a capacity (burst) of
// Limit.
type Rate struct {
	Limit  int64
	Window time.Duration
}

// Rates used by the workloads.
var (
	// Unlimited is a budget no benchmark run can spend, refilling so
	// slowly (a billion units per ten years, 0.3 s a unit) that a key's
	// record stays live between its visits in every workload: the
	// steady-state allowed path, where the stored record is stepped in
	// place. A rate of a billion a second would allow every call too, but
	// a bucket that spends one unit then refills in a nanosecond is full
	// again, its record expired, by the next call: that is the path
	// Keys100kRefilled measures.
	Unlimited = Rate{Limit: algo.MaxLimit, Window: algo.MaxWindow}
	// Refilling refills a unit every nanosecond: every key is full again
	// by the time it is next asked for.
	Refilling = Rate{Limit: algo.MaxLimit, Window: time.Second}
	// Exhausted allows one call an hour: after the first, every call is
	// denied.
	Exhausted = Rate{Limit: 1, Window: time.Hour}
	// Typical is a per-user API limit, ten an hour, used to measure the
	// bytes a key retains.
	Typical = Rate{Limit: 10, Window: time.Hour}
)

// SlidingLogUnlimited replaces Unlimited for the sliding log, whose record
// holds one entry per admitted unit in the trailing window and whose limit
// is at most algo.MaxSlidingLogLimit: 100 per microsecond admits a call
// every 10 ns, faster than any call completes, and keeps the log of a hot
// key to a few dozen entries. In Keys100k and Parallel10k a key's log has
// aged out before the key comes round again.
var SlidingLogUnlimited = Rate{Limit: 100, Window: time.Microsecond}

// Sluice is Sluice's engine over its memory backend, applying one algorithm
// under the namespace "bench".
type Sluice struct {
	e *engine.Engine
	l engine.Limit
	v Variant
}

// Variant is how a Sluice engine is set up and called, beyond its
// algorithm: the opt-in ways of deciding faster that a user may choose. The
// zero Variant is the default, engine.Apply with the system clock.
type Variant struct {
	// Coarse reads the time from an engine.CoarseClock of
	// engine.DefaultClockTick (engine.Options.ClockTick): one atomic load
	// per decision instead of a clock read, decisions resolving to the
	// tick (see engine.CoarseClock for what that changes).
	Coarse bool
	// Prepared decides keys prepared once with engine.Limit.Key, through
	// engine.ApplyKeyInto, as a caller that holds its key for many
	// decisions does: the namespaced key is neither built nor hashed per
	// decision, and the decision is written where the caller keeps it.
	Prepared bool
}

// Suffix names the variant in a benchmark: "" for the default, else
// "+coarse", "+key" or "+coarse+key".
func (v Variant) Suffix() string {
	s := ""
	if v.Coarse {
		s += "+coarse"
	}
	if v.Prepared {
		s += "+key"
	}
	return s
}

// Variants are every Variant, the default first.
var Variants = []Variant{{}, {Coarse: true}, {Prepared: true}, {Coarse: true, Prepared: true}}

// NewSluice returns an engine over memory.New(mopts) (nil means defaults)
// applying the named algorithm at r, reading clock (nil means the system
// clock, the engine's default). A clock given is also the backend's sweeper
// clock.
func NewSluice(name algo.Name, r Rate, clock engine.Clock, mopts *memory.Options) (*Sluice, error) {
	return newSluice(name, r, clock, mopts, Variant{})
}

// NewSluiceVariant is NewSluice with the system clock, set up and called as
// v says.
func NewSluiceVariant(name algo.Name, r Rate, v Variant, mopts *memory.Options) (*Sluice, error) {
	return newSluice(name, r, nil, mopts, v)
}

func newSluice(name algo.Name, r Rate, clock engine.Clock, mopts *memory.Options, v Variant) (*Sluice, error) {
	a, err := algo.New(name, algo.Params{Limit: r.Limit, Window: r.Window})
	if err != nil {
		return nil, err
	}
	var opts *engine.Options
	if clock != nil {
		opts = &engine.Options{Clock: clock}
		m := memory.Options{}
		if mopts != nil {
			m = *mopts
		}
		m.Now = clock.Now
		mopts = &m
	}
	if v.Coarse {
		opts = &engine.Options{ClockTick: engine.DefaultClockTick}
	}
	e, err := engine.New(memory.New(mopts), opts)
	if err != nil {
		return nil, err
	}
	return &Sluice{e: e, l: engine.Limit{Namespace: "bench", Algorithm: a}, v: v}, nil
}

// Allow applies the limit to key at cost 1.
func (s *Sluice) Allow(key string) (bool, error) {
	d, err := s.e.Apply(context.Background(), s.l, key, 1)
	return d.Allowed, err
}

// KeyPreparer is a Limiter whose keys may be prepared once and then decided
// many times, as a caller that holds one key for many decisions does.
type KeyPreparer interface {
	Limiter
	// Prepared reports whether the limiter is to be called through
	// AllowKey: a workload then prepares its keys before the timer starts.
	Prepared() bool
	// Prepare returns key prepared for AllowKey.
	Prepare(key string) engine.Key
	// AllowKey is Allow for a prepared key.
	AllowKey(k *engine.Key) (bool, error)
}

var _ KeyPreparer = (*Sluice)(nil)

// Prepared reports whether s was built with Variant.Prepared.
func (s *Sluice) Prepared() bool { return s.v.Prepared }

// Prepare returns key prepared under s's limit (engine.Limit.Key).
func (s *Sluice) Prepare(key string) engine.Key { return s.l.Key(key) }

// AllowKey applies the limit to a key from Prepare at cost 1, through
// engine.ApplyKeyInto.
func (s *Sluice) AllowKey(k *engine.Key) (bool, error) {
	var d algo.Decision
	err := s.e.ApplyKeyInto(context.Background(), s.l, k, 1, &d)
	return d.Allowed, err
}

// Len returns the number of keys the backend holds.
func (s *Sluice) Len() int { return s.e.Len() }

// Close closes the engine and its backend.
func (s *Sluice) Close() { _ = s.e.Close() }

// Durable stores OpenStore knows.
const (
	// StorePebble is backend/pebble with its default options: Put is not
	// synced (a background syncer syncs the log every 100 ms), WriteBatch
	// always is.
	StorePebble = "pebble"
	// StoreBolt is backend/bolt with its default options: every commit,
	// Put or WriteBatch, is synced.
	StoreBolt = "bolt"
	// StoreBoltNoSync is backend/bolt with Options.NoSync: commits are not
	// synced unless WriteBatch is asked to. Only the raw-store floor uses
	// it; the engine runs bolt as users do, with its defaults.
	StoreBoltNoSync = "bolt-nosync"
)

// OpenStore opens the named durable store (StorePebble, StoreBolt or
// StoreBoltNoSync) in dir with its default options: background sweeper on,
// as users run it.
func OpenStore(name, dir string) (backend.Durable, error) {
	switch name {
	case StorePebble:
		return pebble.Open(dir, nil)
	case StoreBolt:
		return bolt.Open(dir, nil)
	case StoreBoltNoSync:
		return bolt.Open(dir, &bolt.Options{NoSync: true})
	}
	return nil, fmt.Errorf("bench: unknown store %q", name)
}

// NewDurableSluice returns an engine over the durable store named store
// (see OpenStore) opened in dir, keeping records in its in-memory tier and
// writing them back as mode says, with the system clock and every other
// option at its default, applying the named algorithm at r under the
// namespace "bench".
func NewDurableSluice(store, dir string, mode engine.Durability, name algo.Name, r Rate) (*Sluice, error) {
	a, err := algo.New(name, algo.Params{Limit: r.Limit, Window: r.Window})
	if err != nil {
		return nil, err
	}
	s, err := OpenStore(store, dir)
	if err != nil {
		return nil, err
	}
	e, err := engine.New(s, &engine.Options{Durability: mode})
	if err != nil {
		s.Close()
		return nil, err
	}
	return &Sluice{e: e, l: engine.Limit{Namespace: "bench", Algorithm: a}}, nil
}

// Flush writes the records changed since the last flush to a durable
// store now; it does nothing over the memory backend.
func (s *Sluice) Flush() error { return s.e.Flush(context.Background()) }

// CloseErr closes the engine and its backend, returning the error of the
// last flush, which Close drops.
func (s *Sluice) CloseErr() error { return s.e.Close() }

// FixedClock is an engine.Clock that always answers the same time, for the
// fakeclock variant: unlike engine.FakeClock it takes no lock, so the
// difference from the system clock is the cost of reading the time. The
// memory backend's sweeper must read it too (memory.Options.Now), or it
// would expire records by the system clock under the engine's feet.
type FixedClock int64

// Now returns the fixed time.
func (c FixedClock) Now() int64 { return int64(c) }

// XTimeRate is golang.org/x/time/rate used per key the way its users do it:
// a sync.Map from key to *rate.Limiter, filled on first use.
type XTimeRate struct {
	limiters sync.Map // string -> *rate.Limiter
	limit    rate.Limit
	burst    int
}

// NewXTimeRate returns per-key x/time/rate limiters at r.
func NewXTimeRate(r Rate) *XTimeRate {
	return &XTimeRate{limit: rate.Limit(float64(r.Limit) / r.Window.Seconds()), burst: int(r.Limit)}
}

// Allow calls Allow on key's limiter, creating it on a miss.
func (x *XTimeRate) Allow(key string) (bool, error) {
	v, ok := x.limiters.Load(key)
	if !ok {
		v, _ = x.limiters.LoadOrStore(key, rate.NewLimiter(x.limit, x.burst))
	}
	return v.(*rate.Limiter).Allow(), nil
}

// Close does nothing: the limiters have no goroutines.
func (x *XTimeRate) Close() {}

// GoLimiter is github.com/sethvargo/go-limiter's memorystore.
type GoLimiter struct {
	store limiter.Store
}

// NewGoLimiter returns a memorystore of r.Limit tokens per r.Window. Its
// sweeper runs once a day, so that it never runs during a benchmark.
func NewGoLimiter(r Rate) (*GoLimiter, error) {
	s, err := memorystore.New(&memorystore.Config{
		Tokens:        uint64(r.Limit),
		Interval:      r.Window,
		SweepInterval: 24 * time.Hour,
	})
	if err != nil {
		return nil, err
	}
	return &GoLimiter{store: s}, nil
}

// Allow takes a token for key.
func (g *GoLimiter) Allow(key string) (bool, error) {
	_, _, _, ok, err := g.store.Take(context.Background(), key)
	return ok, err
}

// Close stops the store.
func (g *GoLimiter) Close() { _ = g.store.Close(context.Background()) }

// StripedMap is the floor under every keyed limiter: a get-modify-put of a
// 16-byte value in a map chosen by the key's xxhash among 256 stripes, each
// under its own mutex. It limits nothing and always allows.
type StripedMap struct {
	stripes [256]mapStripe
}

type mapStripe struct {
	mu sync.Mutex          // guards m
	m  map[string][16]byte // key -> a record of the size of a GCRA's, plus room
	_  [48]byte            // keep neighbouring stripes' locks off one cache line
}

// NewStripedMap returns an empty StripedMap.
func NewStripedMap() *StripedMap {
	s := new(StripedMap)
	for i := range s.stripes {
		s.stripes[i].m = make(map[string][16]byte)
	}
	return s
}

// Allow increments a counter in key's value and returns true.
func (s *StripedMap) Allow(key string) (bool, error) {
	st := &s.stripes[xxhash.Sum64String(key)&255]
	st.mu.Lock()
	v := st.m[key]
	v[0]++
	st.m[key] = v
	st.mu.Unlock()
	return true, nil
}

// Close does nothing.
func (s *StripedMap) Close() {}

var (
	keysOnce sync.Once
	allKeys  []string
)

// MaxKeys is the number of distinct keys Keys can return.
const MaxKeys = 1_000_000

// Keys returns n distinct 20-byte keys, "user-000000000000000" upwards, built
// once and shared: callers must not modify the slice.
// MemoryWorkloads are the in-process workloads Sluice's targets compare
// with the peers, by benchmark name: the six of the suite's targets, then
// the 100,000 keys and the 10,000 of the parallel workloads decided in a
// random order. cmd/quick runs them, cmd/report reports them.
var MemoryWorkloads = []string{"HotKey", "HotKeyDenied", "Keys100k", "Keys100kDenied", "Parallel10k", "Parallel10kDenied", "Keys100kShuffled", "Keys100kShuffledDenied", "Parallel10kShuffled", "Parallel10kShuffledDenied"}

// Shuffled returns a copy of keys in a random order, the same on every
// call (a fixed seed), so that every implementation walks one order.
func Shuffled(keys []string) []string {
	out := slices.Clone(keys)
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func Keys(n int) []string {
	keysOnce.Do(func() {
		allKeys = make([]string, MaxKeys)
		for i := range allKeys {
			allKeys[i] = fmt.Sprintf("user-%015d", i)
		}
	})
	return allKeys[:n]
}
