package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"sort"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
)

// Errors returned by the engine. Check them with errors.Is.
var (
	// ErrClosed is returned by every call after Close.
	ErrClosed = errors.New("sluice/engine: closed")
	// ErrInvalidCost is returned for a cost of zero or less. It is
	// algo.ErrInvalidCost.
	ErrInvalidCost = algo.ErrInvalidCost
	// ErrCostExceedsCapacity is returned for a cost above the limit's
	// capacity, which could never be allowed. It is
	// algo.ErrCostExceedsCapacity.
	ErrCostExceedsCapacity = algo.ErrCostExceedsCapacity
	// ErrNoAlgorithm is returned for a Limit without an algorithm.
	ErrNoAlgorithm = errors.New("sluice/engine: limit has no algorithm")
	// ErrStore wraps an error from the backend: the decision could not be
	// made or recorded, and the caller has no decision (the middleware
	// applies its open or closed policy). A failed read spends nothing. A
	// failed write may still leave the spending recorded: in Sync mode it
	// stays in the engine's memory and goes out with the next commit, and
	// a Striped backend may have changed the record in place, and over a
	// backend.Swapper the compare-and-swap may have been written before
	// its reply was lost. An error never refunds; a retry after one may be
	// charged twice.
	ErrStore = errors.New("sluice/engine: store")
	// ErrContention is wrapped in ErrStore when a decision over a
	// backend.Swapper found the key changed by others on every one of its
	// compare-and-swaps (SwapOptions.Retries): nothing was spent.
	ErrContention = errors.New("sluice/engine: compare-and-swap kept failing under contention")
)

// IsStoreError reports whether err is the store's failure (ErrStore) or a
// closed engine (ErrClosed), the errors a store-error policy answers,
// rather than the request's own.
func IsStoreError(err error) bool {
	return errors.Is(err, ErrStore) || errors.Is(err, ErrClosed)
}

// DefaultStripes is the number of lock stripes when Options.Stripes is zero.
const DefaultStripes = 256

// Options configure an Engine. The zero value (or nil) means the defaults.
type Options struct {
	// Stripes is the number of lock stripes, a power of two; zero means
	// DefaultStripes. It is ignored over a backend.Striped backend, whose
	// own partitions are the stripes.
	Stripes int
	// Clock tells the time; nil means SystemClock, or a CoarseClock when
	// ClockTick is set.
	Clock Clock
	// ClockTick, when positive and Clock is nil, makes the engine read the
	// time from a CoarseClock of this tick, which it starts in New and stops
	// in Close: a decision then costs an atomic load instead of a clock
	// read, and resolves to the tick (see CoarseClock for exactly what that
	// changes). Zero means the system clock, read at every decision.
	ClockTick time.Duration
	// Logger receives warnings such as corrupt records, at most one line a
	// second; nil means slog.Default().
	Logger *slog.Logger

	// The fields below apply over a durable backend, one implementing
	// backend.Durable (Pebble, bbolt): the engine then
	// keeps the records in use in an in-memory tier and writes them back
	// as Durability says.

	// Durability is Interval (the default) or Sync; see their docs for the
	// exact promise of each, and StoreHealth for what happens while the
	// store fails to write (a full disk).
	Durability Durability
	// FlushInterval is how often Interval mode writes changed records;
	// zero means DefaultFlushInterval (50ms). Sync mode uses it to retry
	// failed commits.
	FlushInterval time.Duration
	// MaxDirty bounds the records awaiting a flush in Interval mode: past
	// it a caller flushes before it returns (backpressure) rather than
	// letting memory grow. Zero means DefaultMaxDirty.
	MaxDirty int

	// Swap applies over a backend.Swapper (a store across a network, such
	// as Redis); see SwapOptions and the package doc's swap path.
	Swap SwapOptions
}

// Limit names a counter space and the algorithm that rules it. Two limits
// with different namespaces never share a key's record, even for the same
// caller key.
type Limit struct {
	// Namespace is prefixed to every key, usually the rule's name.
	Namespace string
	// Algorithm decides each request.
	Algorithm algo.Algorithm
}

// Key is a caller's key prepared under one namespace: its namespaced form
// (AppendKey's) and that form's hash, computed once by Limit.Key so that
// ApplyKeyInto, deciding the same caller again and again, builds and
// hashes nothing. Prepare a key where it is known for longer than one decision
// (a connection's peer, a session, a key decided under several costs or
// in a loop); for a key met once, Apply costs the same. A Key is immutable
// and safe for concurrent use. The zero Key is the empty key under the
// empty namespace, prepared at each use.
type Key struct {
	namespace, key string
	form           []byte // AppendKey(nil, namespace, key); nil in the zero Key
	hash           uint64 // the store's hash of form
}

// Key prepares key under l's namespace for ApplyKeyInto. It allocates the
// namespaced form once.
func (l Limit) Key(key string) Key {
	form := AppendKey(nil, l.Namespace, key)
	return Key{namespace: l.Namespace, key: key, form: form, hash: hashKey(form)}
}

// String returns the caller's key, without its namespace.
func (k Key) String() string { return k.key }

// Stats are counters of events the engine has seen since it was opened.
type Stats struct {
	// CorruptRecords counts stored records that did not decode and were
	// treated as absent.
	CorruptRecords uint64
	// StoreErrors counts backend errors returned to callers.
	StoreErrors uint64
	// Keys is the number of keys held in memory (the memory backend, or
	// the in-memory tier over a durable one), or -1 when unknown.
	Keys int
	// Evictions counts expired keys removed from memory.
	Evictions uint64
	// Flushes counts batch writes to a durable backend (Interval mode),
	// FlushErrors the failed ones, FlushTime their total duration.
	Flushes, FlushErrors uint64
	FlushTime            time.Duration
	// Commits counts group commits in Sync mode, CommitErrors the failed
	// ones.
	Commits, CommitErrors uint64
	// StoreFailing reports that the durable store's writes fail: from a
	// failed flush or commit until one succeeds (see StoreHealth).
	// StoreFailures counts such episodes since the engine was opened.
	StoreFailing  bool
	StoreFailures uint64
	// Dirty is the number of records the durable store lacks: awaiting a
	// flush (or, in Sync mode, a retry of a failed commit), or in one that
	// has not ended.
	Dirty int64
	// Swaps counts compare-and-swaps sent to a backend.Swapper (the first,
	// empty one that reads the store's clock included), Conflicts those
	// that found another record than expected (and were stepped again).
	Swaps, Conflicts uint64
	// LocalDenials counts requests over a backend.Swapper denied from the
	// key's last-seen record, with no round trip.
	LocalDenials uint64
	// LeasesExpired counts the leases of concurrency limits released
	// through a Lease after their maximum hold had passed: their slots
	// had come back by themselves, and the release freed nothing.
	LeasesExpired uint64
}

// stripe is the engine's own per-stripe state on the striped path, guarded
// by the store's stripe lock.
type stripe struct {
	key   []byte   // a copy of the namespaced key, for a store called through an interface
	peek  []byte   // Peek's copy of the record it steps
	fresh [32]byte // room for a new fixed-size record
}

// Engine applies algorithms to keys atomically. See the package doc.
type Engine struct {
	// Read by every decision and written only by New and Close: the lines
	// every core keeps a copy of. The padding keeps another object's
	// writes off the first of them, and the counters below off the last.
	_       [cacheLine]byte
	b       backend.Backend
	store   storeSet // the path New chose for b, and what it counts and sweeps through
	stripes []stripe
	mask    uint64
	clock   Clock
	system  bool         // clock is SystemClock: read it without an interface call
	coarse  *CoarseClock // clock, when it is a CoarseClock: read it without an interface call
	owned   *CoarseClock // the CoarseClock New started for Options.ClockTick, stopped by Close
	log     *slog.Logger
	closed  atomic.Bool
	_       [cacheLine]byte

	// Written by rare events only (a corrupt record, a store error).
	corrupt  atomic.Uint64
	storeErr atomic.Uint64
	lastWarn atomic.Int64 // Unix ns of the last corrupt-record warning

	leasesExpired atomic.Uint64 // leases released after their hold (Stats.LeasesExpired)
}

// New returns an engine over b, choosing once, by the path interface b
// implements, the path every call takes (see the package doc): compare-and-
// swap over a backend.Swapper; the in-memory tier over a backend.Durable;
// the store's own partitions as stripes over a backend.Striped; otherwise
// the engine's own stripe locks. A store implementing more than one of
// those is refused. The engine owns b from then on: Close closes it. When
// New returns an error, b is still the caller's.
func New(b backend.Backend, opts *Options) (*Engine, error) {
	if b == nil {
		return nil, errors.New("sluice/engine: nil backend")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	e := &Engine{b: b, clock: o.Clock, log: o.Logger}
	if e.clock == nil {
		e.clock = SystemClock{}
	}
	_, e.system = e.clock.(SystemClock)
	if e.log == nil {
		e.log = slog.Default()
	}
	n := o.Stripes
	if n != 0 && (n < 0 || bits.OnesCount(uint(n)) != 1) {
		return nil, fmt.Errorf("sluice/engine: stripes must be a power of two, got %d", n)
	}
	if o.Clock == nil && o.ClockTick > 0 {
		e.owned = NewCoarseClock(o.ClockTick)
		e.clock, e.system = e.owned, false
	}
	e.coarse, _ = e.clock.(*CoarseClock)
	n, err := e.choose(b, &o, n)
	if err == nil && (n <= 0 || bits.OnesCount(uint(n)) != 1) {
		err = fmt.Errorf("sluice/engine: stripes must be a power of two, got %d", n)
	}
	if err != nil {
		if e.owned != nil {
			e.owned.Close()
		}
		return nil, err
	}
	e.stripes = make([]stripe, n)
	e.mask = uint64(n - 1)
	return e, nil
}

// Clock returns the engine's clock.
func (e *Engine) Clock() Clock { return e.clock }

// Backend returns the store under the engine, for inspection. Writing
// through it bypasses everything the engine keeps in front of the store:
// its stripe locks (a write may interleave with a decision's read and
// write, and be lost), the in-memory tier over a durable store (which
// neither sees the write nor stops serving, and later flushing, its own
// record), and the last-seen records over a backend.Swapper (the next
// compare-and-swap finds the change, but a denial the last-seen record
// holds is answered from it until its RetryAfter passes). To forget a key,
// use Reset.
func (e *Engine) Backend() backend.Backend { return e.b }

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	s := Stats{CorruptRecords: e.corrupt.Load(), StoreErrors: e.storeErr.Load(), Keys: e.Len(), LeasesExpired: e.leasesExpired.Load()}
	if t := e.store.tier; t != nil {
		s.Flushes, s.FlushErrors = t.flushes.Load(), t.flushErrors.Load()
		s.FlushTime = time.Duration(t.flushNanos.Load())
		s.Dirty = t.dirty.Load()
		s.CommitErrors = t.commitErrors.Load()
		s.StoreFailing = t.health.failing.Load()
		t.health.mu.Lock()
		s.StoreFailures = t.health.episodes
		t.health.mu.Unlock()
		t.commit.mu.Lock()
		s.Commits = t.commit.commits
		t.commit.mu.Unlock()
	}
	if sp := e.store.swap; sp != nil {
		s.Swaps, s.Conflicts, s.LocalDenials = sp.swaps.Load(), sp.conflicts.Load(), sp.localDenials.Load()
	}
	if c := e.store.count; c != nil {
		s.Evictions = c.Evictions()
	}
	return s
}

// StoreHealth returns nil while the durable store under the engine (a
// backend.Durable) takes writes, or, while its writes fail, an error
// wrapping ErrStore and the store's last error, which names the path and
// what failed (errors.Is finds backend.ErrNoSpace when the disk is full).
// Writes fail from a failed flush or group commit until one succeeds; the
// engine retries every FlushInterval, keeping in memory what it could not
// write, and meanwhile every decision that spends returns an error
// wrapping ErrStore, in Interval mode as in Sync mode. It returns nil over
// any other store, whose errors reach each call.
func (e *Engine) StoreHealth() error {
	t := e.store.tier
	if t == nil {
		return nil
	}
	err, since := t.health.state()
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: writes have failed since %s, retried every %s: %w",
		ErrStore, since.UTC().Format(time.RFC3339), t.health.retry, err)
}

// Len returns the number of keys held in memory (the memory backend, or
// the in-memory tier over a durable backend) or by a backend implementing
// backend.Stats, or -1 when it cannot tell.
func (e *Engine) Len() int {
	if c := e.store.count; c != nil {
		return c.Len()
	}
	return -1
}

// AppendKey appends the namespaced form of key under namespace to dst: the
// namespace's length as a uvarint, the namespace, then the key. The length
// prefix makes the split unambiguous whatever bytes either part holds.
func AppendKey(dst []byte, namespace, key string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(namespace)))
	dst = append(dst, namespace...)
	return append(dst, key...)
}

// SplitKey splits a namespaced key made by AppendKey.
func SplitKey(k []byte) (namespace, key string, ok bool) {
	n, w := binary.Uvarint(k)
	if w <= 0 || n > uint64(len(k)-w) {
		return "", "", false
	}
	return string(k[w : w+int(n)]), string(k[w+int(n):]), true
}

func (e *Engine) check(l Limit, cost int64) error {
	if l.Algorithm == nil {
		return ErrNoAlgorithm
	}
	if cost <= 0 || cost > algo.Capacity(l.Algorithm) {
		return algo.CheckCost(l.Algorithm, cost)
	}
	if e.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Apply decides one request of the given cost by key under l, and spends
// the cost if it is allowed. A denial is a Decision with Allowed false,
// never an error. ctx bounds what the call waits for on a store that
// reads it (see the package doc's Context); the memory store never reads
// it. The errors, each to be checked with errors.Is:
//
//   - ErrClosed: the engine (or its backend) is closed.
//   - ErrInvalidCost: cost is zero or less.
//   - ErrCostExceedsCapacity: cost is above l's capacity, so no request of
//     that cost could ever be allowed.
//   - ErrNoAlgorithm: l has no algorithm.
//   - ErrStore, wrapping the backend's error (or ErrContention over a
//     backend.Swapper): the decision could not be made or recorded; see
//     ErrStore for what a failed write may leave spent.
//   - an error wrapping ctx.Err() (context.Canceled or
//     context.DeadlineExceeded): ctx was done before the decision was
//     made, and nothing was spent.
//
// On an error the Decision is zero.
func (e *Engine) Apply(ctx context.Context, l Limit, key string, cost int64) (d algo.Decision, err error) {
	// The decision is written in the caller's frame, not copied back
	// through each call's results.
	if e.store.table != nil {
		// The key's namespaced form (AppendKey's), built here on Apply's
		// stack, without growth checks in the common case (a namespace
		// under 128 bytes, whose length takes one byte, and a key that
		// fits after it), so that the decision is one call away. Its hash
		// is left to decideMemory, which reads the clock first: hashing
		// bytes just written stalls on store forwarding, and the clock
		// read gives the stores time to retire.
		var buf [128]byte
		var k []byte
		if n := len(l.Namespace); n < 0x80 && n+len(key) < len(buf) {
			buf[0] = byte(n)
			copy(buf[1:], l.Namespace)
			copy(buf[1+n:], key)
			k = buf[:1+n+len(key)]
		} else {
			k = AppendKey(buf[:0], l.Namespace, key)
		}
		err = e.decideMemory(l.Algorithm, k, 0, cost, &d)
		return d, err
	}
	err = e.apply(ctx, l, key, cost, true, &d)
	return d, err
}

// ApplyKeyInto is Apply for a key prepared with Limit.Key, writing the
// decision to *d (every field; zero on an error): the same decision, the
// same errors, without building or hashing the namespaced key (over the
// memory backend; other stores take Apply's path) and without copying the
// Decision out through the results, which costs about a tenth of a hot
// key's decision. It reads the key where the caller keeps it. A key
// prepared under another namespace than l's is decided under l's, as
// Apply(ctx, l, k.String(), cost) decides it. d must not be nil.
func (e *Engine) ApplyKeyInto(ctx context.Context, l Limit, k *Key, cost int64, d *algo.Decision) error {
	if e.store.table != nil && k.form != nil && k.namespace == l.Namespace {
		return e.decideMemory(l.Algorithm, k.form, k.hash, cost, d)
	}
	var err error
	*d, err = e.Apply(ctx, l, k.key, cost)
	return err
}

// Peek answers what Apply would, without spending anything.
func (e *Engine) Peek(ctx context.Context, l Limit, key string, cost int64) (d algo.Decision, err error) {
	err = e.apply(ctx, l, key, cost, false, &d)
	return d, err
}

// apply decides into *d, which is left zero when it returns an error.
func (e *Engine) apply(ctx context.Context, l Limit, key string, cost int64, spend bool, d *algo.Decision) error {
	if err := e.check(l, cost); err != nil {
		return err
	}
	if e.store.swap != nil {
		return e.store.swap.apply(ctx, e, l, key, cost, spend, d)
	}
	_, err := e.applyStriped(ctx, l, key, cost, spend, d)
	return err
}

// applyStriped is apply on the striped path, returning the time it decided
// at.
func (e *Engine) applyStriped(ctx context.Context, l Limit, key string, cost int64, spend bool, d *algo.Decision) (int64, error) {
	at, _, err := e.stepStriped(ctx, l, key, settleOp{n: cost}, spend, d)
	return at, err
}

// stepStriped is a request (op.kind settleNone, of cost op.n, spent when
// spend) or a settle (spend true) on the striped path: under the key's
// stripe, read the record, step it, write it. It returns the time a
// request decided at (see spentAt) and the units a settle charged or
// refunded.
func (e *Engine) stepStriped(ctx context.Context, l Limit, key string, op settleOp, spend bool, d *algo.Decision) (at, settled int64, err error) {
	if err := e.done(ctx); err != nil {
		return 0, 0, err
	}
	var buf [128]byte
	k := AppendKey(buf[:0], l.Namespace, key)
	// Read the clock between writing the key and hashing it: hashing bytes
	// just written stalls on store forwarding, and the clock read gives the
	// stores time to retire (about 15% of a hot-key decision).
	now := e.now()
	h := backend.Hash(k)
	i := int(h & e.mask)

	e.lock(i)
	st := &e.stripes[i]
	state, err := e.get(st, h, k, now)
	if err != nil {
		e.unlock(i)
		return 0, 0, e.storeError("read", err)
	}
	switch {
	case !spend:
		// Step may write in place; keep the stored record as it is.
		st.peek = append(st.peek[:0], state...)
		state = st.peek
	case state == nil:
		// A new record is built in the stripe's buffer, then copied by
		// the store: no allocation for a key's first request.
		state = st.fresh[:0]
	}
	var next []byte
	if op.kind == settleNone {
		next = algo.StepInto(l.Algorithm, state, now, op.n, d)
		at = spentAt(l.Algorithm, now, spend, next)
	} else {
		next, settled = op.step(l.Algorithm, state, now, d)
	}
	wrote := spend && (next != nil || d.CorruptState)
	if wrote {
		err = e.write(st, h, k, next, now, d.TTL)
	} else if spend && !d.Allowed && op.kind == settleNone {
		// Nothing is written, but the record is kept until its caller is
		// full again (see backend.Striped.ExtendLocked); a longer expiry is a write,
		// which Sync mode commits before answering.
		wrote = e.keep(st, h, k, now, d.Reset)
	}
	ticket := e.ticket(i)
	e.unlock(i)
	if wrote && err == nil {
		err = e.settle(ticket)
	}

	if d.CorruptState {
		e.noteCorrupt(l.Namespace, key)
	}
	if err != nil {
		*d = algo.Decision{}
		return 0, 0, e.storeError("write", err)
	}
	return at, settled, nil
}

// Request is one part of an ApplyAll call.
type Request struct {
	Limit Limit
	Key   string
	Cost  int64
}

// RequestError is an ApplyAll error that concerns some of its requests
// only: over a backend.Swapper whose keys of one call fall in several
// groups (a Redis Cluster's slots, backend.Swapper.SwapGroup), the
// compare-and-swap of one group failed, and the groups before it may have
// been committed (see the package doc). Request is the index in the call
// of the first request of that group, so that a door counts the error
// under that request's rule; errors.Is sees Err's sentinels (ErrStore,
// ErrClosed).
type RequestError struct {
	Request int
	Err     error
}

// Error returns Err's message.
func (e *RequestError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *RequestError) Unwrap() error { return e.Err }

// ApplyAll decides several requests as one: either every one is allowed and
// all of them are spent, or nothing is spent at all. It returns each
// request's decision, in order, and whether all were allowed. When one is
// denied, the others' decisions say what they would have answered.
//
// The stripes of all the keys are locked together, in ascending order, so no
// other call can spend between the checks and the writes. Over a
// backend.Swapper the keys are committed by one compare-and-swap, or, when
// they fall in several of the store's groups, group by group (see the
// package doc).
//
// The errors are Apply's, for the first request that has one; a store
// error that concerns one group of keys only is a *RequestError naming
// its first request. On an error the decisions are nil.
func (e *Engine) ApplyAll(ctx context.Context, reqs []Request) ([]algo.Decision, bool, error) {
	for _, r := range reqs {
		if err := e.check(r.Limit, r.Cost); err != nil {
			return nil, false, err
		}
	}
	if e.store.swap != nil {
		if len(reqs) == 1 {
			// One request is a single-key decision: the key's queue,
			// its local denials and its coalesced commits.
			d := make([]algo.Decision, 1)
			err := e.store.swap.apply(ctx, e, reqs[0].Limit, reqs[0].Key, reqs[0].Cost, true, &d[0])
			if err != nil {
				return nil, false, err
			}
			return d, d[0].Allowed, nil
		}
		return e.store.swap.applyAll(ctx, e, reqs)
	}
	if err := e.done(ctx); err != nil {
		return nil, false, err
	}
	// One slot per distinct key: a key named twice is stepped twice, the
	// second time from the first step's outcome.
	type slot struct {
		key     []byte
		hash    uint64
		state   []byte
		changed bool
		ttl     time.Duration
		keep    time.Duration // the longest wait a denial on the stored record told
	}
	slots := make([]slot, 0, len(reqs))
	which := make([]int, len(reqs))
	order := make([]int, 0, len(reqs))
	idx := newKeyIndex(len(reqs))
	keys := make([]byte, 0, keysLen(reqs))
	for j, r := range reqs {
		start := len(keys)
		keys = AppendKey(keys, r.Limit.Namespace, r.Key)
		k := keys[start:len(keys):len(keys)]
		h := backend.Hash(k)
		s, fresh := idx.slot(k, h)
		which[j] = s
		if fresh {
			slots = append(slots, slot{key: k, hash: h})
			order = append(order, int(h&e.mask))
		}
	}
	sort.Ints(order)
	order = compactInts(order)
	now := e.clock.Now()
	for _, i := range order {
		e.lock(i)
	}
	unlock := func() {
		for x := len(order) - 1; x >= 0; x-- {
			e.unlock(order[x])
		}
	}
	for s := range slots {
		sl := &slots[s]
		got, err := e.get(&e.stripes[sl.hash&e.mask], sl.hash, sl.key, now)
		if err != nil {
			unlock()
			return nil, false, e.storeError("read", err)
		}
		if got != nil {
			slots[s].state = append([]byte(nil), got...) // never step a stored record in place here
		}
	}

	decisions := make([]algo.Decision, len(reqs))
	all, corrupt := true, false
	for j, r := range reqs {
		sl := &slots[which[j]]
		next, d := r.Limit.Algorithm.Step(sl.state, now, r.Cost)
		decisions[j] = d
		all = all && d.Allowed
		if !d.Allowed && !sl.changed {
			sl.keep = max(sl.keep, d.Reset)
		}
		if d.CorruptState {
			corrupt = true
			sl.state, sl.changed = nil, true
		}
		if next != nil {
			sl.state, sl.changed, sl.ttl = next, true, d.TTL
		}
	}
	var err error
	var ticket uint64
	kept := false
	if all {
		for s := range slots {
			if sl := &slots[s]; sl.changed {
				if err = e.write(&e.stripes[sl.hash&e.mask], sl.hash, sl.key, sl.state, now, sl.ttl); err != nil {
					break
				}
				ticket = max(ticket, e.ticket(int(sl.hash&e.mask)))
			}
		}
	} else {
		// Nothing is spent, but a denied record is kept until its caller
		// is full again (see backend.Striped.ExtendLocked), committed as a write is.
		for s := range slots {
			if sl := &slots[s]; e.keep(&e.stripes[sl.hash&e.mask], sl.hash, sl.key, now, sl.keep) {
				kept = true
				ticket = max(ticket, e.ticket(int(sl.hash&e.mask)))
			}
		}
	}
	unlock()
	if (all || kept) && err == nil {
		err = e.settle(ticket)
	}
	if corrupt {
		e.noteCorrupt("", "")
	}
	if err != nil {
		return nil, false, e.storeError("write", err)
	}
	return decisions, all, nil
}

func compactInts(s []int) []int {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// Reset forgets key's record under l: its next request is decided as the
// key's first. Over a store that reads ctx (see the package doc's
// Context), a ctx done before the record is deleted returns an error
// wrapping ctx.Err() and deletes nothing.
func (e *Engine) Reset(ctx context.Context, l Limit, key string) error {
	if e.closed.Load() {
		return ErrClosed
	}
	k := AppendKey(nil, l.Namespace, key)
	if e.store.swap != nil {
		return e.store.swap.reset(ctx, e, k)
	}
	if err := e.done(ctx); err != nil {
		return err
	}
	h := backend.Hash(k)
	i := int(h & e.mask)
	e.lock(i)
	err := e.del(&e.stripes[i], h, k)
	ticket := e.ticket(i)
	e.unlock(i)
	if err == nil {
		err = e.settle(ticket)
	}
	if err != nil {
		return e.storeError("delete", err)
	}
	return nil
}

// Close closes the engine and its backend. Calls after it return ErrClosed;
// a second Close returns nil.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	if e.owned != nil {
		// Stopped when the engine is closed: the clock stands still at its
		// last tick for whatever the closing still decides or flushes.
		defer e.owned.Close()
	}
	if sp := e.store.swap; sp != nil {
		sp.close() // waits for the calls in flight
		return e.b.Close()
	}
	// Wait for calls holding a stripe to finish before the backend goes.
	for i := range e.stripes {
		e.lock(i)
		e.unlock(i) //nolint:staticcheck // an empty critical section is the point: a barrier
	}
	if t := e.store.tier; t != nil {
		return t.Close() // flushes, then closes the cache and b
	}
	return e.b.Close()
}

// now reads the engine's clock.
func (e *Engine) now() int64 {
	if c := e.coarse; c != nil {
		return c.now.Load()
	}
	if e.system {
		return SystemClock{}.Now()
	}
	return e.clock.Now()
}

// ticket returns, for a caller holding stripe i over a Sync tier, the
// commit ticket of its last write.
func (e *Engine) ticket(i int) uint64 {
	if e.store.tier == nil {
		return 0
	}
	return e.store.tier.stripes[i].ticket
}

// settle finishes a write after the stripe is released: over a durable
// backend it waits for the commit (Sync) or applies backpressure (Interval).
func (e *Engine) settle(ticket uint64) error {
	if e.store.tier == nil {
		return nil
	}
	return e.store.tier.settle(ticket)
}

// Flush writes every record changed since the last flush to a durable
// backend now. It does nothing over other backends. A ctx done before the
// flush starts returns an error wrapping ctx.Err() and writes nothing; a
// flush once started runs to its end.
func (e *Engine) Flush(ctx context.Context) error {
	if e.store.tier == nil {
		return nil
	}
	if e.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return errorf("flush: %w", err)
	}
	if err := e.store.tier.flush(); err != nil {
		return e.storeError("flush", err)
	}
	return nil
}

// Sweep removes the records expired at the engine clock's now, examining at
// most budget records (the store's own batch size when budget is zero or
// less), and returns how many it removed. It sweeps whatever the store
// offers through backend.Sweeper: the memory backend, the in-memory tier
// over a durable backend (whose disk sweeps itself on its own schedule), or
// any other store implementing it; over a store that does not, it does
// nothing. Stores sweep in the background too; Sweep is for programs
// driving a fake clock. An error is ErrClosed or an ErrStore.
func (e *Engine) Sweep(budget int) (int, error) {
	sw := e.store.sweeper
	if e.closed.Load() {
		return 0, ErrClosed
	}
	if sw == nil {
		return 0, nil
	}
	now := e.now()
	if sp := e.store.swap; sp != nil {
		// The store forgets what expired by now: the last-seen records
		// must not answer a denial for an earlier time after it.
		sp.observe(now)
	}
	n, err := sw.Sweep(now, budget)
	if err != nil {
		return n, e.storeError("sweep", err)
	}
	return n, nil
}

func hashKey(k []byte) uint64 { return backend.Hash(k) }

// errorf returns an error of the engine's, its message prefixed.
func errorf(format string, a ...any) error {
	return fmt.Errorf("sluice/engine: "+format, a...)
}

// done returns an error wrapping ctx.Err() when ctx is done and the path
// New chose reads it (every path but a backend.Striped store's; see the
// package doc's Context), else nil: a call it fails has spent nothing.
func (e *Engine) done(ctx context.Context) error {
	if !e.store.readsCtx {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return errorf("%w", err)
	}
	return nil
}

func (e *Engine) storeError(op string, err error) error {
	if errors.Is(err, backend.ErrClosed) {
		return ErrClosed
	}
	e.storeErr.Add(1)
	return fmt.Errorf("%w: %s: %w", ErrStore, op, err)
}

// noteCorrupt counts a corrupt record and logs it, at most once a second so
// that a store full of bad records cannot flood the log.
func (e *Engine) noteCorrupt(namespace, key string) {
	if n, warn := e.countCorrupt(); warn {
		e.warnCorrupt(namespace, key, n)
	}
}

// noteCorruptKey is noteCorrupt for the namespaced key k, split only when
// the warning is logged.
func (e *Engine) noteCorruptKey(k []byte) {
	if n, warn := e.countCorrupt(); warn {
		namespace, key, _ := SplitKey(k)
		e.warnCorrupt(namespace, key, n)
	}
}

// countCorrupt counts a corrupt record and returns the count, and whether
// a warning is due (none in the last second).
func (e *Engine) countCorrupt() (uint64, bool) {
	n := e.corrupt.Add(1)
	now := time.Now().UnixNano()
	last := e.lastWarn.Load()
	return n, now-last >= int64(time.Second) && e.lastWarn.CompareAndSwap(last, now)
}

func (e *Engine) warnCorrupt(namespace, key string, n uint64) {
	e.log.Warn("sluice: corrupt rate-limit record treated as absent",
		"namespace", namespace, "key", key, "corrupt_total", n)
}
