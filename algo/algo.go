package algo

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sluice-go/sluice/codec"
)

// Name names an algorithm: the word a configuration file writes
// ("token_bucket") and the value Go code passes (TokenBucketName) are the
// same Name. An untyped string constant converts to it, so a rule may say
// Algorithm: "gcra" as well as Algorithm: algo.GCRAName; New refuses a
// name that is not one of Names.
type Name string

// The names of the algorithms.
const (
	TokenBucketName    Name = "token_bucket"
	LeakyBucketName    Name = "leaky_bucket"
	FixedWindowName    Name = "fixed_window"
	SlidingLogName     Name = "sliding_log"
	SlidingCounterName Name = "sliding_counter"
	GCRAName           Name = "gcra"
)

// Known reports whether n is one of Names.
func (n Name) Known() bool {
	_, ok := kindOf(n)
	return ok
}

// kind is one row of the table of algorithms: everything the package, and
// the codec, must know about an algorithm besides its step.
type kind struct {
	name   Name
	tag    codec.Tag
	bucket bool // takes a burst: the bucket algorithms, not the window ones
	build  func(rate) Algorithm
}

// kinds is the one table of algorithms, in the order Names lists them.
// Adding an algorithm is a row here, its type with a StepInto method and
// the Settler methods, and a case in StepInto and Capacity (which
// TestFastPath checks are there) and in Charge and Refund, plus its
// record's tag in package codec.
var kinds = [...]kind{
	{TokenBucketName, codec.TagTokenBucket, true, func(r rate) Algorithm { return &TokenBucket{rate: r} }},
	{LeakyBucketName, codec.TagLeakyBucket, true, func(r rate) Algorithm { return &LeakyBucket{rate: r} }},
	{FixedWindowName, codec.TagFixedWindow, false, func(r rate) Algorithm { return &FixedWindow{rate: r} }},
	{SlidingLogName, codec.TagSlidingLog, false, func(r rate) Algorithm { return &SlidingLog{rate: r} }},
	{SlidingCounterName, codec.TagSlidingCounter, false, func(r rate) Algorithm { return &SlidingCounter{rate: r} }},
	{GCRAName, codec.TagGCRA, true, func(r rate) Algorithm { return newGCRA(r) }},
}

// Names lists every algorithm name New accepts, in a stable order.
var Names = func() []Name {
	names := make([]Name, len(kinds))
	for i, k := range kinds {
		names[i] = k.name
	}
	return names
}()

// kindOf returns the table row of the named algorithm.
func kindOf(name Name) (kind, bool) {
	for _, k := range kinds {
		if k.name == name {
			return k, true
		}
	}
	return kind{}, false
}

// Limits on parameters, chosen so that every intermediate value of the exact
// arithmetic fits in 128 bits and every duration in an int64.
const (
	// MaxLimit is the largest limit or burst accepted.
	MaxLimit = 1_000_000_000
	// MaxSlidingLogLimit is the largest capacity of a sliding log, whose
	// record grows with its limit.
	MaxSlidingLogLimit = 100_000
	// MaxWindow is the longest window accepted: ten years.
	MaxWindow = 10 * 365 * 24 * time.Hour
	// maxRefill bounds the time an empty bucket takes to fill: 100 years.
	maxRefill = 100 * 365 * 24 * uint64(time.Hour)
)

// Errors returned by New and by cost checks. A denial is never an error.
var (
	// ErrUnknownAlgorithm is returned by New for a name not in Names.
	ErrUnknownAlgorithm = errors.New("sluice/algo: unknown algorithm")
	// ErrInvalidParams is wrapped by every *ParamError.
	ErrInvalidParams = errors.New("sluice/algo: invalid parameters")
	// ErrInvalidCost is returned for a cost of zero or less.
	ErrInvalidCost = errors.New("sluice/algo: cost must be positive")
	// ErrCostExceedsCapacity is returned for a cost larger than the
	// capacity: such a request could never be allowed, so it is refused
	// rather than denied forever.
	ErrCostExceedsCapacity = errors.New("sluice/algo: cost exceeds capacity")
)

// ParamError reports one invalid parameter. It wraps ErrInvalidParams.
type ParamError struct {
	// Field is the parameter's configuration name: "limit", "window" or
	// "burst".
	Field string
	// Reason says what is wrong with it.
	Reason string
}

func (e *ParamError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalidParams.
func (e *ParamError) Unwrap() error { return ErrInvalidParams }

// Params are an algorithm's parameters.
type Params struct {
	// Limit is how much may be spent per Window. Required, positive.
	Limit int64
	// Window is the period the limit applies to. Required, positive, at
	// most MaxWindow.
	Window time.Duration
	// Burst, when positive, is the capacity of a bucket algorithm
	// (token_bucket, leaky_bucket, gcra), while the rate stays
	// Limit/Window. Zero means the capacity is Limit. The window
	// algorithms refuse a burst.
	Burst int64
	// Calendar, when set, aligns a window algorithm's windows to the
	// calendar of a time zone (a day, a week, a month, a year), whose
	// windows vary in length; Window must then be zero. Only fixed_window
	// and sliding_counter take one.
	Calendar Calendar
}

// Capacity is what one request is measured against: the burst where one is
// set, the limit otherwise.
func (p Params) Capacity() int64 {
	if p.Burst > 0 {
		return p.Burst
	}
	return p.Limit
}

// Decision is the answer to one request.
type Decision struct {
	// Allowed reports whether the request may pass.
	Allowed bool
	// Limit is the capacity a request is measured against.
	Limit int64
	// Remaining is how much could still be spent right now, after this
	// request if it was allowed; never negative.
	Remaining int64
	// RetryAfter is, for a denied request, how long until the same request
	// would be allowed; zero when allowed.
	RetryAfter time.Duration
	// Reset is how long until the full capacity is available again.
	Reset time.Duration
	// Delay is, for an admitted leaky-bucket request, how long it should
	// wait before it is served; zero for every other algorithm.
	Delay time.Duration
	// TTL is how long until the stored record is equivalent to no record:
	// a store may forget the key after it without changing any later
	// decision. Zero means it is equivalent already.
	TTL time.Duration
	// CorruptState reports that the stored record did not decode and was
	// treated as absent. Another algorithm's valid record (left by a rule
	// whose algorithm changed) is treated as absent too, but is not
	// corrupt.
	CorruptState bool
}

// Algorithm is one rate-limiting algorithm with fixed parameters. It is
// immutable and safe for concurrent use.
type Algorithm interface {
	// Name returns the algorithm's name, one of Names.
	Name() Name
	// Params returns the parameters the algorithm was built with.
	Params() Params
	// Step answers one request of the given cost at now (Unix nanoseconds)
	// against the record state (empty when the key has none; an empty
	// slice with spare capacity lets the new record be built in it).
	//
	// next is the record to store, or nil when the stored record need not
	// change (a denial never changes it). When next is not nil it may share
	// state's backing array: Step writes in place when the record keeps its
	// size, so a caller that must keep the old record passes a copy.
	//
	// A cost outside 1..capacity is denied and changes nothing; callers
	// check it first with CheckCost to report the error.
	Step(state []byte, now, cost int64) (next []byte, d Decision)
}

// New builds the algorithm named name from p,
// validating the parameters. Errors name the field: see ParamError.
func New(name Name, p Params) (Algorithm, error) {
	if name == ConcurrencyName {
		if err := validate(name, p, false); err != nil {
			return nil, err
		}
		return &Concurrency{rate: newRate(p)}, nil
	}
	k, ok := kindOf(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q (want one of %v, or %s)", ErrUnknownAlgorithm, name, Names, ConcurrencyName)
	}
	if err := validate(name, p, k.bucket); err != nil {
		return nil, err
	}
	return k.build(newRate(p)), nil
}

// MustNew is New for parameters known to be valid; it panics on an error.
// It is meant for tests and examples.
func MustNew(name Name, p Params) Algorithm {
	a, err := New(name, p)
	if err != nil {
		panic(err)
	}
	return a
}

func validate(name Name, p Params, bucket bool) error {
	if !p.Calendar.IsZero() {
		return validateCalendar(name, p)
	}
	switch {
	case p.Limit <= 0:
		return &ParamError{"limit", fmt.Sprintf("must be positive, got %d", p.Limit)}
	case p.Limit > MaxLimit:
		return &ParamError{"limit", fmt.Sprintf("must be at most %d, got %d", MaxLimit, p.Limit)}
	case p.Window <= 0:
		return &ParamError{"window", fmt.Sprintf("must be positive, got %v", p.Window)}
	case p.Window > MaxWindow:
		return &ParamError{"window", fmt.Sprintf("must be at most %v, got %v", MaxWindow, p.Window)}
	case p.Burst < 0:
		return &ParamError{"burst", fmt.Sprintf("must be positive when set, got %d", p.Burst)}
	case p.Burst > 0 && !bucket:
		return &ParamError{"burst", fmt.Sprintf("%s does not take a burst (only token_bucket, leaky_bucket and gcra do)", name)}
	case p.Burst > MaxLimit:
		return &ParamError{"burst", fmt.Sprintf("must be at most %d, got %d", MaxLimit, p.Burst)}
	case name == GCRAName && int64(p.Window) < p.Limit:
		return &ParamError{"limit", fmt.Sprintf("gcra counts time in whole nanoseconds per token; at most one per nanosecond of window (%d), got %d", int64(p.Window), p.Limit)}
	case name == ConcurrencyName && p.Limit > MaxConcurrencyLimit:
		return &ParamError{"limit", fmt.Sprintf("a concurrency limit keeps one lease per slot; at most %d, got %d", MaxConcurrencyLimit, p.Limit)}
	case name == SlidingLogName && p.Limit > MaxSlidingLogLimit:
		return &ParamError{"limit", fmt.Sprintf("a sliding_log keeps one entry per unit of limit; at most %d, got %d", MaxSlidingLogLimit, p.Limit)}
	}
	// The time to refill the whole capacity must fit comfortably in an int64.
	if full := mulDivCeil(uint64(p.Capacity()), uint64(p.Window), uint64(p.Limit)); full > maxRefill {
		return &ParamError{"burst", fmt.Sprintf("a burst of %d at %d per %v takes too long to refill", p.Burst, p.Limit, p.Window)}
	}
	return nil
}

// CheckCost returns ErrInvalidCost or ErrCostExceedsCapacity (wrapped with
// the figures) when a request of this cost can never be decided by a.
func CheckCost(a Algorithm, cost int64) error {
	if cost <= 0 {
		return fmt.Errorf("%w: got %d", ErrInvalidCost, cost)
	}
	if c := a.Params().Capacity(); cost > c {
		return fmt.Errorf("%w: cost %d can never fit a capacity of %d", ErrCostExceedsCapacity, cost, c)
	}
	return nil
}

// rate holds what every algorithm derives from its parameters.
type rate struct {
	params   Params
	limit    int64     // per window
	window   int64     // nanoseconds; zero with a calendar
	capacity int64     // tokens
	cal      *calendar // the windows' calendar, or nil: whole windows from the epoch
}

func newRate(p Params) rate {
	r := rate{params: p, limit: p.Limit, window: int64(p.Window), capacity: p.Capacity()}
	if !p.Calendar.IsZero() {
		r.cal = newCalendar(p.Calendar)
	}
	return r
}

// Params returns the parameters the algorithm was built with.
func (r *rate) Params() Params { return r.params }

// denyInto writes a denying decision to *d, field by field: a Decision
// built whole and then copied is stored and read back at once, which the
// processor cannot forward from its store buffer.
func (r *rate) denyInto(d *Decision, corrupt bool, remaining, retry, reset int64) {
	d.Allowed = false
	d.Limit = r.capacity
	d.Remaining = max(0, remaining)
	d.RetryAfter = time.Duration(max(1, retry))
	d.Reset = time.Duration(max(0, reset))
	d.Delay = 0
	d.TTL = 0
	d.CorruptState = corrupt
}

// allowInto writes an admitting decision to *d, field by field, as
// denyInto does. reset is also the record's TTL: every algorithm's record is
// equivalent to none once the full capacity is back.
func (r *rate) allowInto(d *Decision, corrupt bool, remaining, reset, delay int64) {
	d.Allowed = true
	d.Limit = r.capacity
	d.Remaining = remaining
	d.RetryAfter = 0
	d.Reset = time.Duration(reset)
	d.Delay = time.Duration(delay)
	d.TTL = time.Duration(reset)
	d.CorruptState = corrupt
}

func (r *rate) validCost(cost int64) bool { return cost > 0 && cost <= r.capacity }

// clampCost returns cost forced into 1..capacity. A cost outside that range
// is always denied; clamping it keeps the arithmetic of the denial in range.
func (r *rate) clampCost(cost int64) int64 { return min(max(cost, 1), r.capacity) }

// align returns the start of the window holding now, counting whole windows
// from the Unix epoch (floor division, also for times before it).
func align(now, window int64) int64 {
	q := now / window
	if now%window < 0 {
		q--
	}
	return q * window
}

// until returns t-now in nanoseconds: zero when t is not after now, and
// saturating rather than wrapping when the two are further apart than an
// int64 holds (only records holding nonsense times get there).
func until(t, now int64) int64 {
	if t <= now {
		return 0
	}
	return clampI64(uint64(t - now))
}

// satAdd adds two int64s, saturating instead of wrapping.
func satAdd(a, b int64) int64 {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// StepInto is a.Step writing the decision to *d rather than returning it.
// The package's own algorithms are called directly, without an interface
// call, and write straight into *d; any other Algorithm through a.Step.
func StepInto(a Algorithm, state []byte, now, cost int64, d *Decision) []byte {
	switch a := a.(type) {
	case *TokenBucket:
		return a.StepInto(state, now, cost, d)
	case *GCRA:
		return a.StepInto(state, now, cost, d)
	case *LeakyBucket:
		return a.StepInto(state, now, cost, d)
	case *FixedWindow:
		return a.StepInto(state, now, cost, d)
	case *SlidingCounter:
		return a.StepInto(state, now, cost, d)
	case *SlidingLog:
		return a.StepInto(state, now, cost, d)
	case *Concurrency:
		return a.StepInto(state, now, cost, d)
	}
	next, dd := stepOther(a, state, now, cost)
	*d = dd
	return next
}

// stepOther is StepInto for an Algorithm of another package's making. It is
// a variable so that TestFastPath can see that none of the package's own
// algorithms ever gets here. It returns the decision rather than taking d,
// which would then escape to the heap on every path.
var stepOther = func(a Algorithm, state []byte, now, cost int64) ([]byte, Decision) {
	return a.Step(state, now, cost)
}

// Capacity returns a.Params().Capacity(), reading the package's own
// algorithms' parameters without an interface call.
func Capacity(a Algorithm) int64 {
	switch a := a.(type) {
	case *TokenBucket:
		return a.capacity
	case *GCRA:
		return a.capacity
	case *LeakyBucket:
		return a.capacity
	case *FixedWindow:
		return a.capacity
	case *SlidingCounter:
		return a.capacity
	case *SlidingLog:
		return a.capacity
	case *Concurrency:
		return a.capacity
	}
	return capacityOther(a)
}

// capacityOther is Capacity for an Algorithm of another package's making; a
// variable for the same reason as stepOther.
var capacityOther = func(a Algorithm) int64 { return a.Params().Capacity() }

// isCorrupt reports whether state, which did not decode as this
// algorithm's record, is corrupt: present and not another algorithm's
// valid record. A rule whose algorithm changed finds the old algorithm's
// records under its keys; those start fresh like absent ones, and are not
// counted as corrupt.
//
// codec.Valid reaches a record's layout through a table of functions, to
// which escape analysis must give up the bytes it is passed; it is given a
// copy, so that a step's record may live on its caller's stack (the
// engine's lock-free read steps a copy there). Only a record the step could
// not read gets here.
func isCorrupt(state []byte) bool {
	return len(state) != 0 && !codec.Valid(bytes.Clone(state))
}

// Quota returns the quota policy the IETF RateLimit-Policy field states for
// a: units, the quota (the capacity, which a Decision's Remaining never
// exceeds), and window, the time in which a whole quota comes back — a
// window algorithm's window; for a bucket (token, leaky, GCRA), the time
// it takes to refill from empty: the capacity at the rate of limit per
// window (a burst of 5 at 2 per 2 s is 5 per 5 s). A window that follows a
// calendar varies in length; window is then the longest it can be
// (Calendar.Longest: 25 hours for a day in a zone that keeps summer time),
// so that the reset a decision states, at most window, is never cut short
// of the real boundary.
func Quota(a Algorithm) (units int64, window time.Duration) {
	p := a.Params()
	c := p.Capacity()
	if !p.Calendar.IsZero() {
		return c, p.Calendar.Longest()
	}
	switch a.Name() {
	case TokenBucketName, LeakyBucketName, GCRAName:
		if p.Limit <= 0 {
			return c, p.Window
		}
		w := mulDivCeil(uint64(c), uint64(p.Window), uint64(p.Limit))
		return c, time.Duration(min(w, uint64(math.MaxInt64)))
	}
	return c, p.Window
}

// QuotaReset returns the IETF RateLimit field's reset (t) for d under a
// quota policy window w (Quota's): on a denial, d.RetryAfter, when the same
// request passes, as Retry-After says; otherwise d.Reset, when the whole
// quota is back, but at most w (a sliding counter's count still weighs in
// the next window, so its quota can take up to two windows to be whole;
// t never says more than the policy's window).
func QuotaReset(d Decision, w time.Duration) time.Duration {
	if !d.Allowed {
		return d.RetryAfter
	}
	return min(d.Reset, w)
}
