package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
)

// The constants of the memory and disk bounds, measured on the 10,000,000
// key floods (see the package documentation for the formulas): 200 to 265
// resident bytes per peak live key over the memory backend, about 470 over
// Pebble (its memtables and caches included), and about 60 bytes of disk
// per record written within the disk window.
const (
	// rssPerKey bounds the resident bytes one live key costs: the arena
	// entry and its index slot (about 90 bytes for these keys), the
	// arena's append headroom and the old copy alive while a shard's arena
	// or index grows, and the garbage collector's headroom (GOGC=100 lets
	// the heap reach twice what is live).
	rssPerKey = 400
	// rssFixedMemory and rssFixedPebble are the resident bytes a flood may
	// add beyond its keys: the workers' and sampler's garbage, and over
	// Pebble its memtables (4 MiB each, several queued while they flush),
	// the tier's dirty set between two flushes and a flush batch in
	// flight. Pebble's block cache is added to rssFixedPebble as sized.
	rssFixedMemory = 64 << 20
	rssFixedPebble = 120 << 20
	// diskPerKey bounds the bytes on disk one record written within the
	// disk window costs: its key and value in the write-ahead log and in a
	// table, its tombstone once swept, and the space not yet reclaimed by
	// compaction.
	diskPerKey = 200
	// diskFixed is the disk a Pebble store may use beyond its records:
	// write-ahead logs kept for recycling, the manifest, and the tables a
	// compaction writes before it deletes its inputs.
	diskFixed = 64 << 20
	// liveGrace is added to the live-key bound for the keys in flight
	// (one per worker) and the victims.
	liveGrace = 64
)

// config describes one flood.
type config struct {
	keys      int           // distinct keys to send
	backend   string        // memory or pebble
	dir       string        // pebble's directory; a temporary one when empty
	ttl       time.Duration // the flood rule's window: a key's TTL after its one request
	algorithm string        // the flood rule's algorithm
	workers   int           // goroutines sending keys
	sample    time.Duration // period of the RSS and disk samples
	stripes   int           // engine stripes, the memory store's shards; 0: default
	// The memory store's sweeper (the memory backend's own; over Pebble the
	// tier's cache always uses the defaults): 0 means the default, as
	// sluice serve runs it.
	sweepInterval time.Duration
	sweepBatch    int
	// noSweeper turns the memory store's sweeper off while the bounds are
	// still those of a sweeper every sweepInterval: a run that shows the
	// checks fail when keys are not swept.
	noSweeper   bool
	pebbleSweep time.Duration // Pebble's sweeper period; 0: the default (10s)
	pebbleCache int64         // Pebble's block cache in bytes; 0: the store's default
	maxKeys     int           // memory store MaxKeys; 0: unlimited
	slack       float64       // multiplies the live-key and disk bounds
	settle      time.Duration // how long to wait for the keys to expire and be swept; 0: derived
	progress    io.Writer     // one line per sample; nil: none
}

// sample is one reading taken while the flood runs or settles.
type sample struct {
	at       time.Duration // since the flood started
	arrivals int64         // keys sent so far
	live     int           // keys the engine holds in memory
	rss      int64         // resident bytes
	disk     int64         // bytes under the Pebble directory
}

// result is what a flood measured.
type result struct {
	cfg         config
	elapsed     time.Duration // the flood itself, first key to last
	sent        int64         // keys sent
	admitted    int64         // keys stored (sent minus refused)
	refused     int64         // keys refused with backend.ErrFull
	denied      int64         // first requests of fresh keys that were denied
	errs        []string      // unexpected errors, at most a few
	maxTTL      time.Duration // the largest TTL a flood decision carried
	victimReset []string      // moments the victim was found with budget
	rate        float64       // keys sent per second
	peakLive    int
	peakRSS     int64 // VmHWM (or the sampled maximum if it cannot be reset)
	baseRSS     int64 // resident bytes before the flood
	peakDisk    int64
	baseDisk    int64
	finalLive   int
	finalDisk   int64
	diskRecords int // flood records left on disk at the end (pebble)
	evictions   uint64
	sweepLag    time.Duration // the memory sweeper's period
	settled     time.Duration // from the flood's end until the keys were gone
	samples     []sample
	trace       []point // sent and live keys every 10ms
}

// point is one fine-grained reading of the keys sent and held.
type point struct {
	at   time.Duration
	sent int64
	live int
	// swept is when the memory sweeper's last complete pass began, on the
	// same scale as at; negative when none has completed (or the store
	// does not say).
	swept time.Duration
}

// The live-key trace is read every tracePeriod; a reading later than
// tracePeriod + stallSlop counts the excess as a stall of the process.
const (
	tracePeriod = 10 * time.Millisecond
	stallSlop   = 40 * time.Millisecond
)

// victimLimit is a long-window rule whose budget the victim spends before
// the flood: the flood must not hand it back.
var victimLimit = engine.Limit{
	Namespace: "login",
	Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 3, Window: time.Hour}),
}

const victimKey = "user:victim"

// run floods an engine as cfg says and returns what it measured. An error
// is a setup failure; a broken bound is reported by check.
func run(cfg config) (*result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	alg, err := algo.New(algo.Name(cfg.algorithm), algo.Params{Limit: 1, Window: cfg.ttl})
	if err != nil {
		return nil, fmt.Errorf("-algorithm: %w", err)
	}
	ipLimit := engine.Limit{Namespace: "per-ip", Algorithm: alg}
	keyLimit := engine.Limit{Namespace: "per-api-key", Algorithm: alg}
	id, err := identity.New(identity.Config{})
	if err != nil {
		return nil, err
	}

	r := &result{cfg: cfg}
	r.sweepLag = cfg.sweeper()
	eng, store, cleanup, err := cfg.open()
	if err != nil {
		return nil, err
	}
	defer cleanup()
	defer eng.Close()

	// The victim spends its whole budget first.
	for i := range 4 {
		d, err := eng.Apply(context.Background(), victimLimit, victimKey, 1)
		if err != nil {
			return nil, fmt.Errorf("victim: %w", err)
		}
		if want := i < 3; d.Allowed != want {
			return nil, fmt.Errorf("victim: request %d allowed %v, want %v", i+1, d.Allowed, want)
		}
	}
	if err := eng.Flush(context.Background()); err != nil {
		return nil, err
	}

	runtime.GC()
	debug.FreeOSMemory()
	canReset := resetPeakRSS()
	r.baseRSS, _, err = procStatus()
	if err != nil {
		return nil, err
	}
	if cfg.backend == "pebble" {
		if r.baseDisk, err = dirBytes(cfg.dir); err != nil {
			return nil, err
		}
	}

	var (
		next     atomic.Int64 // next key index to claim
		sent     atomic.Int64
		refused  atomic.Int64
		denied   atomic.Int64
		maxTTL   atomic.Int64
		errMu    sync.Mutex
		wg       sync.WaitGroup
		sampleMu sync.Mutex
	)
	addErr := func(err error) {
		errMu.Lock()
		if len(r.errs) < 5 {
			r.errs = append(r.errs, err.Error())
		}
		errMu.Unlock()
	}
	seed := rand.Uint32()
	start := time.Now()
	startUnix := start.UnixNano()
	// sweptAt reads when the memory sweeper's last complete pass began
	// (Unix ns, the store's clock), or 0.
	sweptAt := func() int64 { return 0 }
	if m, ok := store.(*memory.Store); ok {
		sweptAt = func() int64 { return m.Stats().SweptAt }
	}

	// The sampler: live keys every 10ms for the peak, the victim every
	// 100ms, RSS and disk every cfg.sample.
	sampleNow := func() sample {
		s := sample{at: time.Since(start), arrivals: sent.Load(), live: eng.Len()}
		s.rss, _, _ = procStatus()
		if cfg.backend == "pebble" {
			s.disk, _ = dirBytes(cfg.dir)
		}
		return s
	}
	record := func(s sample) {
		sampleMu.Lock()
		r.samples = append(r.samples, s)
		r.peakRSS = max(r.peakRSS, s.rss)
		r.peakDisk = max(r.peakDisk, s.disk)
		r.peakLive = max(r.peakLive, s.live)
		sampleMu.Unlock()
		if cfg.progress != nil {
			fmt.Fprintf(cfg.progress, "t=%6.1fs sent=%10d live=%9d rss=%7.1f MiB disk=%7.1f MiB\n",
				s.at.Seconds(), s.arrivals, s.live, mib(s.rss), mib(s.disk))
		}
	}
	checkVictim := func(when string) {
		d, err := eng.Peek(context.Background(), victimLimit, victimKey, 1)
		if err != nil {
			addErr(fmt.Errorf("victim peek %s: %w", when, err))
			return
		}
		if d.Allowed || d.Remaining != 0 {
			sampleMu.Lock()
			if len(r.victimReset) < 5 {
				r.victimReset = append(r.victimReset, fmt.Sprintf("%s: allowed %v, remaining %d", when, d.Allowed, d.Remaining))
			}
			sampleMu.Unlock()
		}
	}
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		fast := time.NewTicker(tracePeriod)
		defer fast.Stop()
		slow := time.NewTicker(cfg.sample)
		defer slow.Stop()
		for n := 0; ; n++ {
			select {
			case <-stopSampler:
				return
			case <-fast.C:
				p := point{at: time.Since(start), sent: sent.Load(), live: eng.Len(), swept: -1}
				if at := sweptAt(); at > 0 {
					p.swept = time.Duration(at - startUnix)
				}
				sampleMu.Lock()
				r.peakLive = max(r.peakLive, p.live)
				r.trace = append(r.trace, p)
				sampleMu.Unlock()
				if n%10 == 0 {
					checkVictim(fmt.Sprintf("at %.1fs", time.Since(start).Seconds()))
				}
			case <-slow.C:
				record(sampleNow())
			}
		}
	}()

	for w := range cfg.workers {
		wg.Go(func() {
			ident := &http.Request{Header: http.Header{}, RemoteAddr: "192.0.2.1:40000"}
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			var localTTL time.Duration
			defer func() {
				for {
					cur := maxTTL.Load()
					if int64(localTTL) <= cur || maxTTL.CompareAndSwap(cur, int64(localTTL)) {
						return
					}
				}
			}()
			const chunk = 256
			for {
				lo := next.Add(chunk) - chunk
				if lo >= int64(cfg.keys) {
					return
				}
				hi := min(lo+chunk, int64(cfg.keys))
				for i := lo; i < hi; i++ {
					lim, key, err := floodKey(id, ident, rng, uint32(i), seed, ipLimit, keyLimit)
					if err != nil {
						addErr(err)
						return
					}
					d, err := eng.Apply(context.Background(), lim, key, 1)
					sent.Add(1)
					switch {
					case err == nil:
						localTTL = max(localTTL, d.TTL)
						if !d.Allowed {
							denied.Add(1)
						}
					case cfg.maxKeys > 0 && errors.Is(err, backend.ErrFull):
						refused.Add(1)
					default:
						addErr(fmt.Errorf("key %d (%s): %w", i, key, err))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	r.sent, r.refused, r.denied = sent.Load(), refused.Load(), denied.Load()
	r.admitted = r.sent - r.refused
	r.maxTTL = time.Duration(maxTTL.Load())
	r.rate = float64(r.sent) / r.elapsed.Seconds()
	record(sampleNow())
	checkVictim("when the flood ended")

	// Settle: wait until every flood key has expired and been swept from
	// memory and, over Pebble, from disk.
	settle := cfg.settle
	if settle == 0 {
		settle = r.maxTTL + 3*r.sweepLag + 30*time.Second // a ceiling: the wait ends as soon as the keys are gone
		if cfg.backend == "pebble" {
			settle += 3 * cfg.pebbleSweepInterval()
		}
	}
	ended := time.Now()
	deadline := ended.Add(settle)
	for {
		gone := eng.Len() <= 1
		if gone && cfg.backend == "pebble" {
			if err := eng.Flush(context.Background()); err != nil { // expired dirty records become deletes
				addErr(fmt.Errorf("flush: %w", err))
			}
			n, err := floodRecords(store, 1)
			if err != nil {
				addErr(err)
			}
			gone = n == 0
		}
		if gone || time.Now().After(deadline) {
			break
		}
		time.Sleep(min(50*time.Millisecond, cfg.sample))
	}
	r.settled = time.Since(ended)
	close(stopSampler)
	<-samplerDone
	final := sampleNow()
	record(final)
	checkVictim("after the flood settled")
	r.finalLive, r.finalDisk = final.live, final.disk
	if cfg.backend == "pebble" {
		if r.diskRecords, err = floodRecords(store, math.MaxInt); err != nil {
			addErr(err)
		}
	}
	r.evictions = eng.Stats().Evictions
	if _, hwm, err := procStatus(); err == nil && canReset {
		r.peakRSS = max(r.peakRSS, hwm)
	}
	return r, nil
}

// floodKey returns the limit and the key of the flood's i-th caller, as the
// middleware would key it: even i is a client at a random address in its own
// IPv6 /64 under an "ip" rule, odd i a fresh random API key under an
// "api_key" rule. mix32 is a bijection, so the keys of distinct i are
// distinct (the /64 of even i is mix32(i)'s bits; API keys hash a secret
// carrying mix32(i)).
func floodKey(id *identity.Identifier, r *http.Request, rng *rand.Rand, i, seed uint32, ipLimit, keyLimit engine.Limit) (engine.Limit, string, error) {
	m := mix32(i + seed)
	if i%2 == 0 {
		var a [16]byte
		hi := uint64(0x2001_0db8)<<32 | uint64(m)
		lo := rng.Uint64()
		for b := range 8 {
			a[b] = byte(hi >> (56 - 8*b))
			a[8+b] = byte(lo >> (56 - 8*b))
		}
		return ipLimit, id.IPKey(netip.AddrFrom16(a)), nil
	}
	var buf [48]byte
	secret := append(buf[:0], "sk_live_"...)
	secret = strconv.AppendUint(secret, uint64(m)<<32|uint64(rng.Uint32()), 36)
	r.Header.Set(identity.DefaultAPIKeyHeader, string(secret))
	k, err := id.Key(sluice.ScopeAPIKey, r.RemoteAddr, r.Header)
	return keyLimit, k, err
}

// mix32 is a bijective 32-bit mixer (xor-shifts and odd multipliers).
func mix32(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	x ^= x >> 16
	return x
}

// floodRecords counts the records on disk other than the victim's, up to
// limit.
func floodRecords(store backend.Backend, limit int) (int, error) {
	rg, ok := store.(backend.Durable)
	if !ok {
		return 0, nil
	}
	victim := string(engine.AppendKey(nil, victimLimit.Namespace, victimKey))
	n := 0
	err := rg.Range(nil, func(rec backend.Record) bool {
		if string(rec.Key) != victim {
			n++
		}
		return n < limit
	})
	if err != nil {
		return n, fmt.Errorf("counting the records on disk: %w", err)
	}
	return n, nil
}

func (c *config) validate() error {
	switch {
	case c.keys <= 0:
		return fmt.Errorf("-keys: want a positive number of keys, got %d", c.keys)
	case c.keys > math.MaxUint32:
		return fmt.Errorf("-keys: at most %d keys, got %d", uint64(math.MaxUint32), c.keys)
	case c.backend != "memory" && c.backend != "pebble":
		return fmt.Errorf("-backend %q: want memory or pebble", c.backend)
	case c.backend == "memory" && c.dir != "":
		return errors.New("-dir: the memory backend keeps nothing on disk")
	case c.backend == "pebble" && c.maxKeys != 0:
		return errors.New("-maxkeys: only the memory backend has MaxKeys")
	case c.ttl <= 0:
		return fmt.Errorf("-ttl: want a positive duration, got %v", c.ttl)
	case c.workers <= 0:
		return fmt.Errorf("-workers: want at least one, got %d", c.workers)
	case c.sample <= 0:
		return fmt.Errorf("-sample: want a positive duration, got %v", c.sample)
	case c.stripes < 0 || c.stripes&(c.stripes-1) != 0:
		return fmt.Errorf("-stripes: want zero (the default) or a power of two, got %d", c.stripes)
	case c.sweepInterval < 0:
		return fmt.Errorf("-sweep-interval: want zero (the default) or a positive duration, got %v", c.sweepInterval)
	case c.sweepBatch < 0:
		return fmt.Errorf("-sweep-batch: want zero (the default) or a positive number, got %d", c.sweepBatch)
	case c.backend == "pebble" && (c.sweepInterval != 0 || c.sweepBatch != 0 || c.noSweeper):
		return errors.New("-sweep-interval, -sweep-batch, -no-sweeper: the tier over Pebble sweeps its cache with the memory store's defaults; use -stripes")
	case c.pebbleSweep < 0:
		return fmt.Errorf("-pebble-sweep: want zero (the default) or a positive duration, got %v", c.pebbleSweep)
	case c.maxKeys < 0:
		return fmt.Errorf("-maxkeys: want zero (unlimited) or a positive number, got %d", c.maxKeys)
	case c.slack < 1:
		return fmt.Errorf("-slack: want at least 1, got %v", c.slack)
	case c.settle < 0:
		return fmt.Errorf("-settle: want zero (derived) or a positive duration, got %v", c.settle)
	}
	return nil
}

// sweeper returns the period of the memory sweeper in use (the memory
// backend's, or the tier cache's over Pebble). Each run examines every key
// held, so its period alone bounds how long an expired key stays.
func (c *config) sweeper() time.Duration {
	if c.sweepInterval == 0 {
		return memory.DefaultSweepInterval
	}
	return c.sweepInterval
}

// pebbleCacheSize is the block cache the Pebble store runs with.
func (c *config) pebbleCacheSize() int64 {
	if c.pebbleCache > 0 {
		return c.pebbleCache
	}
	return pebble.DefaultCacheSize
}

func (c *config) pebbleSweepInterval() time.Duration {
	if c.pebbleSweep == 0 {
		return pebble.DefaultSweepInterval
	}
	return c.pebbleSweep
}

// open builds the engine the flood runs through: the memory backend with
// its own background sweeper, as sluice serve runs it, or Pebble (with its
// sweeper) under the engine's in-memory tier in Interval mode. cleanup
// removes a temporary directory.
func (c *config) open() (eng *engine.Engine, store backend.Backend, cleanup func(), err error) {
	cleanup = func() {}
	switch c.backend {
	case "memory":
		interval := c.sweepInterval
		if c.noSweeper {
			interval = -1
		}
		store = memory.New(&memory.Options{
			Shards:        c.stripes,
			SweepInterval: interval,
			SweepBatch:    c.sweepBatch,
			MaxKeys:       c.maxKeys,
		})
	case "pebble":
		if c.dir == "" {
			tmp, err := os.MkdirTemp("", "sluice-flood-")
			if err != nil {
				return nil, nil, nil, err
			}
			c.dir = tmp
			cleanup = func() { os.RemoveAll(tmp) }
		}
		store, err = pebble.Open(c.dir, &pebble.Options{SweepInterval: c.pebbleSweep, CacheSize: c.pebbleCache})
		if err != nil {
			cleanup()
			return nil, nil, nil, err
		}
	}
	eng, err = engine.New(store, &engine.Options{Stripes: c.stripes})
	if err != nil {
		store.Close()
		cleanup()
		return nil, nil, nil, err
	}
	return eng, store, cleanup, nil
}

// bounds are the limits a flood must stay within.
type bounds struct {
	live    int           // at the moment live keys came closest to (or went furthest past) their bound, by ratio
	liveAt  time.Duration // that moment
	peak    int           // live keys then
	window  time.Duration // TTL + 2 × sweep period
	stalled time.Duration // time the process did not run within the window at liveAt
	lag     time.Duration // how far the sweeper's last complete pass stretched the window at liveAt
	rss     int64
	disk    int64
}

// bounds derives the limits from what the flood measured:
//
//	live(t) ≤ (keys sent in (t − W − stalls, t]) × slack + liveGrace   (≤ MaxKeys when set)
//	W       = TTL + 2 × sweep period
//	RSS     ≤ RSS before the flood + fixed + peak live × rssPerKey
//	disk    ≤ disk before the flood + diskFixed
//	          + rate × (TTL + flush interval + 2 × Pebble sweep period) × diskPerKey × slack
//
// A key expires TTL after it arrives; the memory sweeper's next run starts
// within a period of that and examines every key held, in steps, taking
// well under a period even at millions of keys, so the key is freed within
// TTL + 2 periods of its arrival, however fast keys arrive. The bound is
// measured over the window itself at every 10ms reading, so a flood whose
// rate varies is held to what arrived recently rather than to its average.
// stalls is the time within the window in which the process did not run at
// all (on a shared machine it can be seconds): neither did its sweeper.
//
// The sweeper also says when its last complete pass began (swept): every
// key expired by then is gone, so the keys live at t arrived after
// swept − TTL. Where that reaches further back than the window above (a
// sweeper goroutine the scheduler kept waiting while the rest ran), the
// window opens there instead: the bound is then what the sweeper's own
// measured progress promises, and a sweeper that skips keys still breaks
// it. A sweeper that never completes a pass stretches nothing.
func (r *result) bounds() bounds {
	b := bounds{live: liveGrace}
	b.window = r.maxTTL + 2*r.sweepLag
	worst := math.Inf(-1)
	for i, p := range r.trace {
		// Walk back to the first reading taken before the window opened.
		// Time in which the process did not run at all (a reading more
		// than stallSlop late) is time the sweeper could not run either:
		// it stretches the window.
		j, stalled := i, time.Duration(0)
		for ; j > 0; j-- {
			gap := r.trace[j].at - r.trace[j-1].at
			stalled += max(0, gap-tracePeriod-stallSlop)
			if p.at-r.trace[j-1].at > b.window+stalled {
				break
			}
		}
		var lag time.Duration
		if p.swept >= 0 {
			if opens := p.swept - r.maxTTL; opens < p.at-b.window-stalled {
				lag = p.at - opens - b.window - stalled
				for ; j > 0 && r.trace[j-1].at >= opens; j-- {
				}
			}
		}
		var before int64
		if j > 0 {
			before = r.trace[j-1].sent
		}
		bound := int(math.Ceil(float64(p.sent-before)*r.cfg.slack)) + liveGrace
		if r.cfg.maxKeys > 0 {
			// A Put counts a new key before it checks MaxKeys and
			// uncounts a refused one: a reader may see one extra key per
			// writer.
			bound = min(bound, r.cfg.maxKeys+r.cfg.workers)
		}
		if ratio := float64(p.live) / float64(bound); ratio > worst {
			worst = ratio
			b.live, b.liveAt, b.peak, b.stalled, b.lag = bound, p.at, p.live, stalled, lag
		}
	}
	fixed := int64(rssFixedMemory)
	if r.cfg.backend == "pebble" {
		fixed = rssFixedPebble + r.cfg.pebbleCacheSize()
		diskWindow := r.maxTTL + engine.DefaultFlushInterval + 2*r.cfg.pebbleSweepInterval()
		b.disk = r.baseDisk + diskFixed + int64(r.rate*diskWindow.Seconds()*diskPerKey*r.cfg.slack)
	}
	b.rss = r.baseRSS + fixed + int64(r.peakLive)*rssPerKey
	return b
}

// check returns one message per broken promise; none means the flood stayed
// within its bounds.
func (r *result) check() []string {
	var fails []string
	failf := func(format string, args ...any) { fails = append(fails, fmt.Sprintf(format, args...)) }
	b := r.bounds()
	for _, e := range r.errs {
		failf("error: %s", e)
	}
	if r.sent != int64(r.cfg.keys) {
		failf("sent %d keys, want %d", r.sent, r.cfg.keys)
	}
	if r.denied > 0 {
		failf("fresh keys denied: %d first requests of new keys were denied (a key collided or a budget leaked between keys)", r.denied)
	}
	if b.peak > b.live {
		msg := fmt.Sprintf("live keys: %d at %v > bound %d = keys sent in the last %v (TTL %v + 2 × sweep %v + stalls %v + sweeper lag %v) × %.2g + %d",
			b.peak, b.liveAt.Round(time.Millisecond), b.live, (b.window + b.stalled + b.lag).Round(time.Millisecond), r.maxTTL, r.sweepLag, b.stalled.Round(time.Millisecond), b.lag.Round(time.Millisecond), r.cfg.slack, liveGrace)
		if r.cfg.maxKeys > 0 {
			msg += fmt.Sprintf(" (MaxKeys %d)", r.cfg.maxKeys)
		}
		failf("%s", msg)
	}
	if r.peakRSS > b.rss {
		failf("peak RSS %.1f MiB > bound %.1f MiB = base %.1f MiB + fixed + peak live %d × %d B",
			mib(r.peakRSS), mib(b.rss), mib(r.baseRSS), r.peakLive, rssPerKey)
	}
	if r.cfg.backend == "pebble" {
		if r.peakDisk > b.disk {
			failf("peak disk %.1f MiB > bound %.1f MiB = base %.1f MiB + %d MiB + %.0f keys/s × (TTL + flush + 2 × Pebble sweep %v) × %d B × %.2g",
				mib(r.peakDisk), mib(b.disk), mib(r.baseDisk), diskFixed>>20, r.rate, r.cfg.pebbleSweepInterval(), diskPerKey, r.cfg.slack)
		}
		if r.diskRecords > 0 {
			failf("expired records not swept from disk: %d flood records still stored %v after the flood", r.diskRecords, r.settled.Round(time.Millisecond))
		}
	}
	if r.finalLive > 1 {
		failf("expired keys not swept from memory: %d keys held %v after the flood (want only the victim)", r.finalLive, r.settled.Round(time.Millisecond))
	} else if r.evictions < uint64(r.admitted) {
		failf("evictions %d < %d flood keys stored: keys left memory other than by sweeping", r.evictions, r.admitted)
	}
	if len(r.victimReset) > 0 {
		failf("the victim's spent budget was reset: %v", r.victimReset)
	}
	if r.cfg.maxKeys > 0 {
		if r.refused == 0 {
			failf("MaxKeys %d: no key was refused, so the flood never filled the store (raise -keys or lower -maxkeys)", r.cfg.maxKeys)
		}
	}
	return fails
}

// longestStall returns the longest time the live-key trace went unread
// beyond its period: the longest the process did not run.
func (r *result) longestStall() time.Duration {
	var worst time.Duration
	for i := 1; i < len(r.trace); i++ {
		worst = max(worst, r.trace[i].at-r.trace[i-1].at-tracePeriod)
	}
	return worst
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
