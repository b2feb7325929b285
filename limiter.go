package sluice

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// defaultLimiterName is a Limiter's name when WithName is not given: the
// namespace of its keys in the store, and the name its rate-limit fields
// carry.
const defaultLimiterName = "limiter"

// Errors of a Limiter. A denial is never an error.
var (
	// ErrInvalidLimiter is matched by every *LimiterError: NewLimiter was
	// given a limit, window, option or combination of options it cannot
	// build a limiter from.
	ErrInvalidLimiter = errors.New("sluice: invalid limiter")
	// ErrWaitExceedsDeadline is returned by Wait when the request could
	// not pass before the context's deadline: Wait returns at once rather
	// than sleep towards a deadline it cannot meet.
	ErrWaitExceedsDeadline = errors.New("sluice: Wait would exceed the context's deadline")
)

// LimiterError reports what NewLimiter was given that it cannot build a
// limiter from. It matches ErrInvalidLimiter and unwraps to the cause where
// there is one (an *algo.ParamError, algo.ErrUnknownAlgorithm).
type LimiterError struct {
	// Field names what is wrong: "limit", "window", "burst", "algorithm",
	// "name", "clock" or "store".
	Field string
	// Reason says what is wrong with it.
	Reason string
	// Err is the underlying error, or nil.
	Err error
}

// Error returns "sluice: limiter: field: reason".
func (e *LimiterError) Error() string {
	return "sluice: limiter: " + e.Field + ": " + e.Reason
}

// Unwrap returns the underlying error, if any.
func (e *LimiterError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalidLimiter.
func (e *LimiterError) Is(target error) bool { return target == ErrInvalidLimiter }

// Limiter is a rate limit with one budget per key: limit per window for
// each key, decided by one algorithm (token_bucket unless WithAlgorithm
// says otherwise) over a store (the process's memory unless WithStore or
// WithEngine says otherwise) with the system clock (unless WithClock).
// It is the shortest way to a decision:
//
//	lim, err := sluice.NewLimiter(5, time.Minute)
//	...
//	if !lim.Allow("user:u-1") {
//		// too many: come back later
//	}
//
// Allow answers yes or no, as x/time/rate's Limiter.Allow does; Take spends
// a cost and returns the whole Decision (what is left, when to retry) or the
// store's error; Wait blocks until the request passes; Reset forgets a key.
// The same Limiter over Pebble, bbolt or Redis is one option away:
// WithStore.
//
// Each key's budget is exact for the algorithm (see package algo), and a
// request is spent atomically: concurrent callers of one key never pass
// more than the budget between them. A Limiter is safe for concurrent use.
type Limiter struct {
	eng   *engine.Engine
	rule  *CompiledRule // the limiter's one rule: its engine.Limit and rate-limit fields
	owned bool          // Close closes eng: the limiter built it

	// after returns a channel that fires once d has passed; Wait sleeps on
	// it. Tests replace it to move a fake clock instead.
	after func(d time.Duration) (<-chan time.Time, func() bool)
}

// Option configures NewLimiter.
type Option func(*limiterConfig)

type limiterConfig struct {
	algorithm algo.Name
	burst     int64
	name      string
	store     backend.Backend
	eng       *engine.Engine
	clock     engine.Clock
}

// WithAlgorithm decides with the named algorithm, one of algo.Names,
// instead of algo.TokenBucketName.
func WithAlgorithm(name algo.Name) Option {
	return func(c *limiterConfig) { c.algorithm = name }
}

// WithBurst sets the capacity of a bucket algorithm (token_bucket,
// leaky_bucket, gcra): up to burst may pass at once, while the rate stays
// limit per window. Zero means the capacity is the limit. The window
// algorithms refuse a burst.
func WithBurst(burst int64) Option {
	return func(c *limiterConfig) { c.burst = burst }
}

// WithName names the limiter: the namespace of its keys in the store, so
// that limiters sharing a store or an engine never share a key's budget,
// and the name its rate-limit fields carry (RateLimit-Policy). Empty means
// "limiter".
func WithName(name string) Option {
	return func(c *limiterConfig) { c.name = name }
}

// WithStore keeps the budgets in b instead of the process's memory: a
// *pebble.Store or *bolt.Store keeps them across restarts, a *redis.Store
// shares them across a fleet. The limiter builds an engine over b with
// the engine's defaults (for a store on disk, Interval durability) and
// owns it: Close closes the engine and b. For other engine options, build
// the engine and use WithEngine.
func WithStore(b backend.Backend) Option {
	return func(c *limiterConfig) { c.store = b }
}

// WithEngine decides on e, which the caller keeps: several limiters may
// share one engine (give each its own WithName), and Close does not close
// it. The engine's store and clock are the limiter's, so WithEngine
// excludes WithStore and WithClock.
func WithEngine(e *engine.Engine) Option {
	return func(c *limiterConfig) { c.eng = e }
}

// WithClock tells the time with clock instead of the system clock, as
// engine.Options.Clock does: an engine.FakeClock lets a test move time
// instead of sleeping.
func WithClock(clock engine.Clock) Option {
	return func(c *limiterConfig) { c.clock = clock }
}

// NewLimiter returns a limiter admitting, for each key, limit per window.
// The default algorithm is token_bucket (a burst of up to limit at once,
// then limit per window), over the memory store with the system clock;
// the options change each of these. The errors are *LimiterError values
// naming what is wrong (a limit or window that is not positive, an
// unknown algorithm, conflicting options).
func NewLimiter(limit int64, window time.Duration, opts ...Option) (*Limiter, error) {
	c := limiterConfig{algorithm: algo.TokenBucketName, name: defaultLimiterName}
	for _, o := range opts {
		o(&c)
	}
	switch {
	case c.name == "":
		c.name = defaultLimiterName
	case c.eng != nil && c.store != nil:
		return nil, &LimiterError{Field: "store", Reason: "WithStore and WithEngine exclude each other: the engine has its store"}
	case c.eng != nil && c.clock != nil:
		return nil, &LimiterError{Field: "clock", Reason: "WithClock and WithEngine exclude each other: the engine has its clock"}
	case c.algorithm == algo.ConcurrencyName:
		return nil, &LimiterError{Field: "algorithm", Reason: "concurrency bounds the requests in flight, not a rate over a window: use httplimit.NewInFlight or grpclimit.NewInFlight, or a rule with algorithm concurrency"}
	}
	rule, err := Rule{
		Name: c.name, PathPrefix: "/", Scope: ScopeGlobal,
		Algorithm: c.algorithm, Limit: limit, Window: window, Burst: c.burst,
	}.compile()
	if err != nil {
		var re *RuleError
		if errors.As(err, &re) {
			return nil, &LimiterError{Field: re.Field, Reason: re.Reason, Err: re.Err}
		}
		return nil, &LimiterError{Field: "limit", Reason: err.Error(), Err: err}
	}
	l := &Limiter{eng: c.eng, rule: rule, after: timerAfter}
	if l.eng == nil {
		store := c.store
		if store == nil {
			store = memory.New(nil)
		}
		l.eng, err = engine.New(store, &engine.Options{Clock: c.clock})
		if err != nil {
			return nil, &LimiterError{Field: "store", Reason: err.Error(), Err: err}
		}
		l.owned = true
	}
	return l, nil
}

// Allow reports whether one request of key may pass now, and spends it if
// so. It is Take with a cost of 1 and no context, for the path where only
// yes or no matters; over the memory store it costs one decision and no
// allocation. A store that fails (a disk, Redis) denies: Allow fails
// closed, and Take reports the error.
func (l *Limiter) Allow(key string) bool {
	d, err := l.eng.Apply(context.Background(), l.rule.limit, key, 1)
	return err == nil && d.Allowed
}

// Take decides a request of key costing n (at least 1, at most the
// capacity: the burst, or the limit), spending n if it passes. The Decision
// says whether it passed and, either way, the capacity (Limit), what is
// left (Remaining), when the whole capacity is back (Reset) and, for a
// denial, when the same request would pass (RetryAfter). The error is the
// store's failure or an invalid cost (algo.ErrInvalidCost,
// algo.ErrCostExceedsCapacity); a denial is not an error. ctx bounds the
// call where it reaches a store across a network.
func (l *Limiter) Take(ctx context.Context, key string, n int64) (algo.Decision, error) {
	return l.eng.Apply(ctx, l.rule.limit, key, n)
}

// Wait blocks until one request of key passes, and spends it: it takes,
// and on a denial sleeps for the decision's RetryAfter and takes again. It
// returns ctx's error if ctx ends first, and ErrWaitExceedsDeadline at once,
// without sleeping, when the wait would outlast ctx's deadline; a store's
// error as Take returns it. Over a leaky bucket an admitted request then
// sleeps for its Delay, so that requests leave at the rate: the request is
// spent even if ctx ends during that sleep. Wait sleeps on the system's
// timers, whatever clock WithClock gives: over a clock that does not move,
// it waits until ctx ends.
func (l *Limiter) Wait(ctx context.Context, key string) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, err := l.Take(ctx, key, 1)
		if err != nil {
			return err
		}
		sleep := d.RetryAfter
		if d.Allowed {
			if d.Delay <= 0 {
				return nil
			}
			sleep = d.Delay
		} else if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < sleep {
			return fmt.Errorf("%w: the request passes in %v", ErrWaitExceedsDeadline, sleep)
		}
		fired, stop := l.after(sleep)
		select {
		case <-fired:
		case <-ctx.Done():
			stop()
			return ctx.Err()
		}
		if d.Allowed {
			return nil
		}
	}
}

// Reset forgets key's budget: its next request is decided as a new key's.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	return l.eng.Reset(ctx, l.rule.limit, key)
}

// Rule returns the rule the limiter decides under, named as the limiter:
// its Policy and AppendRateLimit make the rate-limit fields of the
// limiter's decisions (package httplimit's PerHandler sends them).
func (l *Limiter) Rule() *CompiledRule { return l.rule }

// Engine returns the engine the limiter decides on.
func (l *Limiter) Engine() *engine.Engine { return l.eng }

// Close closes the engine the limiter built, and with it the store given
// by WithStore; calls after it fail (Allow denies). An engine given by
// WithEngine stays open: it is the caller's.
func (l *Limiter) Close() error {
	if !l.owned {
		return nil
	}
	return l.eng.Close()
}

// timerAfter is Wait's sleep: a timer of d.
func timerAfter(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}
