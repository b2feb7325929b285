package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/memory"
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
	// a Striped backend may have changed the record in place. An error
	// never refunds; a retry after one may be charged twice.
	ErrStore = errors.New("sluice/engine: store")
)

// DefaultStripes is the number of lock stripes when Options.Stripes is zero.
const DefaultStripes = 256

// Options configure an Engine. The zero value (or nil) means the defaults.
type Options struct {
	// Stripes is the number of lock stripes, a power of two; zero means
	// DefaultStripes. It is ignored over a backend.Striped backend, whose
	// own partitions are the stripes.
	Stripes int
	// Clock tells the time; nil means SystemClock.
	Clock Clock
	// Logger receives warnings such as corrupt records, at most one line a
	// second; nil means slog.Default().
	Logger *slog.Logger

	// The fields below apply over a durable backend, one implementing
	// backend.Batcher and backend.Loader (Pebble, bbolt): the engine then
	// keeps the records in use in an in-memory tier and writes them back
	// as Durability says.

	// Durability is Interval (the default) or Sync; see their docs for the
	// exact promise of each.
	Durability Durability
	// FlushInterval is how often Interval mode writes changed records;
	// zero means DefaultFlushInterval (50ms). Sync mode uses it to retry
	// failed commits.
	FlushInterval time.Duration
	// MaxDirty bounds the records awaiting a flush in Interval mode: past
	// it a caller flushes before it returns (backpressure) rather than
	// letting memory grow. Zero means DefaultMaxDirty.
	MaxDirty int
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
	// Commits counts group commits in Sync mode.
	Commits uint64
	// Dirty is the number of records awaiting a flush.
	Dirty int64
}

// stripe is the engine's own per-stripe state.
type stripe struct {
	mu    sync.Mutex // over a plain backend: makes read-step-write indivisible for the stripe's keys; guards key
	key   []byte     // the namespaced key of the call holding the stripe
	peek  []byte     // Peek's copy of the record it steps
	fresh [32]byte   // room for a new fixed-size record
	_     [64]byte   // keep neighbouring stripes' locks off one cache line
}

// Engine applies algorithms to keys atomically. See the package doc.
type Engine struct {
	b       backend.Backend
	striped backend.Striped // b, when it partitions itself, or the tier; nil otherwise
	mem     *memory.Store   // b, when it is the memory backend: called directly, so keys stay on the stack
	tier    *tier           // the in-memory tier over a durable b; nil otherwise
	stripes []stripe
	mask    uint64
	clock   Clock
	system  bool // clock is SystemClock: read it without an interface call
	log     *slog.Logger

	closed   atomic.Bool
	corrupt  atomic.Uint64
	storeErr atomic.Uint64
	lastWarn atomic.Int64 // Unix ns of the last corrupt-record warning
}

// New returns an engine over b. The engine owns b from then on: Close closes
// it.
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
	if _, ok := b.(backend.Batcher); ok {
		t, err := newTier(b, &o, e.clock)
		if err != nil {
			return nil, err
		}
		e.tier, e.striped, n = t, t, t.Stripes()
	} else if s, ok := b.(backend.Striped); ok {
		e.mem, _ = b.(*memory.Store)
		e.striped, n = s, s.Stripes()
	} else if n == 0 {
		n = DefaultStripes
	}
	if n <= 0 || bits.OnesCount(uint(n)) != 1 {
		return nil, fmt.Errorf("sluice/engine: stripes must be a power of two, got %d", n)
	}
	e.stripes = make([]stripe, n)
	e.mask = uint64(n - 1)
	return e, nil
}

// Clock returns the engine's clock.
func (e *Engine) Clock() Clock { return e.clock }

// Backend returns the store under the engine.
func (e *Engine) Backend() backend.Backend { return e.b }

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	s := Stats{CorruptRecords: e.corrupt.Load(), StoreErrors: e.storeErr.Load(), Keys: e.Len()}
	if e.tier != nil {
		s.Flushes, s.FlushErrors = e.tier.flushes.Load(), e.tier.flushErrors.Load()
		s.FlushTime = time.Duration(e.tier.flushNanos.Load())
		s.Dirty = e.tier.dirty.Load()
		e.tier.commit.mu.Lock()
		s.Commits = e.tier.commit.commits
		e.tier.commit.mu.Unlock()
	}
	if mem := e.memory(); mem != nil {
		s.Evictions = mem.Stats().Evicted
	}
	return s
}

// memory returns the memory store holding the records in use: the memory
// backend itself, or the tier's cache over a durable backend; nil otherwise.
func (e *Engine) memory() *memory.Store {
	if e.tier != nil {
		return e.tier.cache
	}
	return e.mem
}

// Len returns the number of keys the backend holds, or -1 when it cannot
// tell (it does not implement backend.Counter).
func (e *Engine) Len() int {
	if e.tier != nil {
		return e.tier.cache.Len()
	}
	if c, ok := e.b.(backend.Counter); ok {
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
// the cost if it is allowed.
func (e *Engine) Apply(l Limit, key string, cost int64) (d algo.Decision, err error) {
	// The decision is written in the caller's frame, not copied back
	// through each call's results.
	err = e.apply(l, key, cost, true, &d)
	return d, err
}

// Peek answers what Apply would, without spending anything.
func (e *Engine) Peek(l Limit, key string, cost int64) (d algo.Decision, err error) {
	err = e.apply(l, key, cost, false, &d)
	return d, err
}

// apply decides into *d, which is left zero when it returns an error.
func (e *Engine) apply(l Limit, key string, cost int64, spend bool, d *algo.Decision) error {
	if err := e.check(l, cost); err != nil {
		return err
	}
	var buf [128]byte
	k := AppendKey(buf[:0], l.Namespace, key)
	// Read the clock between writing the key and hashing it: hashing bytes
	// just written stalls on store forwarding, and the clock read gives the
	// stores time to retire (about 15% of a hot-key decision).
	now := e.now()
	h := xxhash.Sum64(k)
	i := int(h & e.mask)

	e.lock(i)
	st := &e.stripes[i]
	// The memory backend is called directly, with the key on the stack;
	// any other backend through an interface, which would make the stack
	// buffer escape, so it gets the stripe's own copy of the key.
	var (
		state []byte
		err   error
	)
	if e.mem != nil {
		state, err = e.mem.GetLocked(h, k, now)
	} else {
		st.key = append(st.key[:0], k...)
		state, err = e.get(h, st.key, now)
	}
	if err != nil {
		e.unlock(i)
		return e.storeError("read", err)
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
	next := algo.StepInto(l.Algorithm, state, now, cost, d)
	wrote := spend && (next != nil || d.CorruptState)
	switch {
	case !wrote:
	case e.mem != nil:
		err = e.writeMem(h, k, next, now, d.TTL)
	default:
		err = e.write(h, st.key, next, now, d.TTL)
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
		return e.storeError("write", err)
	}
	return nil
}

// Request is one part of an ApplyAll call.
type Request struct {
	Limit Limit
	Key   string
	Cost  int64
}

// ApplyAll decides several requests as one: either every one is allowed and
// all of them are spent, or nothing is spent at all. It returns each
// request's decision, in order, and whether all were allowed. When one is
// denied, the others' decisions say what they would have answered.
//
// The stripes of all the keys are locked together, in ascending order, so no
// other call can spend between the checks and the writes.
func (e *Engine) ApplyAll(reqs []Request) ([]algo.Decision, bool, error) {
	for _, r := range reqs {
		if err := e.check(r.Limit, r.Cost); err != nil {
			return nil, false, err
		}
	}
	// One slot per distinct key: a key named twice is stepped twice, the
	// second time from the first step's outcome.
	type slot struct {
		key     []byte
		hash    uint64
		state   []byte
		changed bool
		ttl     time.Duration
	}
	var slots []slot
	which := make([]int, len(reqs))
	order := make([]int, 0, len(reqs))
	for j, r := range reqs {
		k := AppendKey(nil, r.Limit.Namespace, r.Key)
		which[j] = -1
		for s := range slots {
			if string(slots[s].key) == string(k) {
				which[j] = s
			}
		}
		if which[j] < 0 {
			h := xxhash.Sum64(k)
			which[j] = len(slots)
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
		got, err := e.get(slots[s].hash, slots[s].key, now)
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
	if all {
		for s := range slots {
			if sl := &slots[s]; sl.changed {
				if err = e.write(sl.hash, sl.key, sl.state, now, sl.ttl); err != nil {
					break
				}
				ticket = max(ticket, e.ticket(int(sl.hash&e.mask)))
			}
		}
	}
	unlock()
	if all && err == nil {
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
// key's first.
func (e *Engine) Reset(l Limit, key string) error {
	if e.closed.Load() {
		return ErrClosed
	}
	k := AppendKey(nil, l.Namespace, key)
	h := xxhash.Sum64(k)
	i := int(h & e.mask)
	e.lock(i)
	err := e.del(h, k)
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
	// Wait for calls holding a stripe to finish before the backend goes.
	for i := range e.stripes {
		e.lock(i)
		e.unlock(i) //nolint:staticcheck // an empty critical section is the point: a barrier
	}
	if e.tier != nil {
		return e.tier.Close() // flushes, then closes the cache and b
	}
	return e.b.Close()
}

// now reads the engine's clock.
func (e *Engine) now() int64 {
	if e.system {
		return SystemClock{}.Now()
	}
	return e.clock.Now()
}

// ticket returns, for a caller holding stripe i over a Sync tier, the
// commit ticket of its last write.
func (e *Engine) ticket(i int) uint64 {
	if e.tier == nil {
		return 0
	}
	return e.tier.stripes[i].ticket
}

// settle finishes a write after the stripe is released: over a durable
// backend it waits for the commit (Sync) or applies backpressure (Interval).
func (e *Engine) settle(ticket uint64) error {
	if e.tier == nil {
		return nil
	}
	return e.tier.settle(ticket)
}

// Flush writes every record changed since the last flush to a durable
// backend now. It does nothing over other backends.
func (e *Engine) Flush() error {
	if e.tier == nil {
		return nil
	}
	if e.closed.Load() {
		return ErrClosed
	}
	if err := e.tier.flush(); err != nil {
		return e.storeError("flush", err)
	}
	return nil
}

// Sweep removes from memory (the memory backend, or the in-memory tier over
// a durable backend) the records expired at the engine clock's now,
// examining at most budget records, and returns how many it removed. The
// stores also sweep in the background; Sweep is for programs driving a fake
// clock. A durable backend sweeps its disk on its own schedule.
func (e *Engine) Sweep(budget int) int {
	mem := e.memory()
	if mem == nil || e.closed.Load() {
		return 0
	}
	return mem.Sweep(e.now(), budget)
}

func hashKey(k []byte) uint64 { return xxhash.Sum64(k) }

func (e *Engine) lock(i int) {
	if e.mem != nil {
		e.mem.Lock(i)
		return
	}
	if e.striped != nil {
		e.striped.Lock(i)
		return
	}
	e.stripes[i].mu.Lock()
}

func (e *Engine) unlock(i int) {
	if e.mem != nil {
		e.mem.Unlock(i)
		return
	}
	if e.striped != nil {
		e.striped.Unlock(i)
		return
	}
	e.stripes[i].mu.Unlock()
}

func (e *Engine) get(h uint64, k []byte, now int64) ([]byte, error) {
	if e.mem != nil {
		return e.mem.GetLocked(h, k, now)
	}
	if e.striped != nil {
		return e.striped.GetLocked(h, k, now)
	}
	return e.b.Get(k, now)
}

// write stores next under k until now+ttl, or removes the record when there
// is no next record (a corrupt one being dropped) or it is already
// equivalent to none.
func (e *Engine) write(h uint64, k, next []byte, now int64, ttl time.Duration) error {
	if e.mem != nil {
		return e.writeMem(h, k, next, now, ttl)
	}
	if next == nil || ttl <= 0 {
		return e.del(h, k)
	}
	exp := now + int64(ttl)
	if e.striped != nil {
		return e.striped.PutLocked(h, k, next, exp)
	}
	return e.b.Put(k, next, exp)
}

// writeMem is write over the memory backend. It is called directly, with
// no interface in sight, so that a key on the caller's stack stays there.
func (e *Engine) writeMem(h uint64, k, next []byte, now int64, ttl time.Duration) error {
	if next == nil || ttl <= 0 {
		return e.mem.DeleteLocked(h, k)
	}
	return e.mem.PutLocked(h, k, next, now+int64(ttl))
}

func (e *Engine) del(h uint64, k []byte) error {
	if e.mem != nil {
		return e.mem.DeleteLocked(h, k)
	}
	if e.striped != nil {
		return e.striped.DeleteLocked(h, k)
	}
	return e.b.Delete(k)
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
	n := e.corrupt.Add(1)
	now := time.Now().UnixNano()
	last := e.lastWarn.Load()
	if now-last < int64(time.Second) || !e.lastWarn.CompareAndSwap(last, now) {
		return
	}
	e.log.Warn("sluice: corrupt rate-limit record treated as absent",
		"namespace", namespace, "key", key, "corrupt_total", n)
}
