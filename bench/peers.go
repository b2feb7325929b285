package bench

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/didip/tollbooth/v7"
	tollboothlimiter "github.com/didip/tollbooth/v7/limiter"
	"github.com/go-chi/httprate"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"
	"go.uber.org/ratelimit"
)

// The peers below are keyed limiters used the way their documentation
// shows, each at the workload's Rate: r.Limit per r.Window with a capacity
// (burst) of r.Limit wherever the library has one.

// Ulule is github.com/ulule/limiter/v3 with its memory store: a fixed
// window per key that opens at the key's first request after the previous
// window expired (not aligned to the clock), counted under the key
// "limiter:<key>". Its cleaner runs once a day so that it never runs during
// a benchmark; it stops when the store is garbage collected, as the library
// arranges (there is no Close).
type Ulule struct {
	lim *ulule.Limiter
}

// NewUlule returns a ulule limiter of r.Limit requests per r.Window.
func NewUlule(r Rate) (*Ulule, error) {
	if r.Limit <= 0 || r.Window <= 0 {
		return nil, fmt.Errorf("bench: ulule needs a positive limit and window, got %+v", r)
	}
	store := ululememory.NewStoreWithOptions(ulule.StoreOptions{
		Prefix:          ulule.DefaultPrefix,
		CleanUpInterval: 24 * time.Hour,
	})
	return &Ulule{lim: ulule.New(store, ulule.Rate{Period: r.Window, Limit: r.Limit})}, nil
}

// Allow counts a request for key, as ulule's middlewares do with Get, and
// reports whether the count is within the limit.
func (u *Ulule) Allow(key string) (bool, error) {
	c, err := u.lim.Get(context.Background(), key)
	return !c.Reached, err
}

// Close does nothing: the store has no Close.
func (u *Ulule) Close() {}

// Throttled is github.com/throttled/throttled/v2's GCRA rate limiter over
// its memstore, unbounded (memstore.New(0)): a bounded store evicts the
// least recently used keys, which would forget keys in BytesPerKey.
type Throttled struct {
	rl *throttled.GCRARateLimiterCtx
}

// NewThrottled returns a GCRA of r.Limit per r.Window with a burst of
// r.Limit (throttled's MaxBurst counts the requests beyond the first, so it
// is r.Limit-1). now, when not nil, replaces the store's clock
// (memstore.SetTimeNow), for replaying a trace at given times.
func NewThrottled(r Rate, now func() time.Time) (*Throttled, error) {
	if r.Limit <= 0 || r.Limit > math.MaxInt32 || r.Window < time.Duration(r.Limit) {
		return nil, fmt.Errorf("bench: throttled needs 0 < limit ≤ %d and an emission interval of at least 1ns, got %+v", math.MaxInt32, r)
	}
	st, err := memstore.New(0)
	if err != nil {
		return nil, err
	}
	if now != nil {
		st.SetTimeNow(now)
	}
	rl, err := throttled.NewGCRARateLimiterCtx(throttled.WrapStoreWithContext(st), throttled.RateQuota{
		MaxRate:  throttled.PerDuration(int(r.Limit), r.Window),
		MaxBurst: int(r.Limit) - 1,
	})
	if err != nil {
		return nil, err
	}
	return &Throttled{rl: rl}, nil
}

// Allow asks for one unit of key's quota.
func (t *Throttled) Allow(key string) (bool, error) {
	limited, _, err := t.rl.RateLimitCtx(context.Background(), key, 1)
	return !limited, err
}

// Close does nothing: memstore has no goroutines.
func (t *Throttled) Close() {}

// HTTPRate is github.com/go-chi/httprate's local counter
// (httprate.NewLocalLimitCounter) used as a keyed limiter. The decision is
// httprate's own (RateLimiter.OnLimit): windows aligned to the limiter's
// start, the previous window's count weighted by the share of it still
// inside the sliding window, the estimate rounded to an integer; a request
// is denied if the estimate plus one exceeds the limit, otherwise counted.
// As in httprate, one mutex per limiter covers the read and the increment.
// Only the response headers OnLimit writes are left out; the middleware
// benchmarks measure those. The counter keeps a 64-bit hash of each key
// (xxh3), never the key itself, so its bytes per key do not include the
// key, and two keys whose hashes collide share a count.
type HTTPRate struct {
	mu      sync.Mutex // serialises the estimate and the increment, as RateLimiter.mu does
	counter httprate.LimitCounter
	limit   int
	window  time.Duration
	offset  time.Duration
	now     func() time.Time
}

// NewHTTPRate returns httprate's sliding window counter of r.Limit per
// r.Window. now, when not nil, replaces time.Now, for replaying a trace at
// given times; the windows are aligned to its first answer, as httprate
// aligns them to the limiter's creation.
func NewHTTPRate(r Rate, now func() time.Time) (*HTTPRate, error) {
	if r.Limit <= 0 || r.Limit > math.MaxInt32 || r.Window <= 0 {
		return nil, fmt.Errorf("bench: httprate needs 0 < limit ≤ %d and a positive window, got %+v", math.MaxInt32, r)
	}
	if now == nil {
		now = time.Now
	}
	start := now().UTC()
	return &HTTPRate{
		counter: httprate.NewLocalLimitCounter(r.Window),
		limit:   int(r.Limit),
		window:  r.Window,
		offset:  start.Sub(start.Truncate(r.Window)),
		now:     now,
	}, nil
}

// Allow applies httprate's decision to key and counts the request if it
// is allowed.
func (h *HTTPRate) Allow(key string) (bool, error) {
	now := h.now().UTC()
	cur := now.Add(-h.offset).Truncate(h.window).Add(h.offset)
	h.mu.Lock()
	defer h.mu.Unlock()
	currCount, prevCount, err := h.counter.Get(key, cur, cur.Add(-h.window))
	if err != nil {
		return false, err
	}
	diff := now.Sub(cur)
	estimate := float64(prevCount)*(float64(h.window)-float64(diff))/float64(h.window) + float64(currCount)
	if int(math.Round(estimate))+1 > h.limit {
		return false, nil
	}
	if err := h.counter.IncrementBy(key, cur, 1); err != nil {
		return false, err
	}
	return true, nil
}

// Close does nothing: the local counter has no goroutines.
func (h *HTTPRate) Close() {}

// Tollbooth is github.com/didip/tollbooth/v7 used through LimitByKeys with
// the key as its only element: a token bucket per key (tollbooth's copy of
// x/time/rate) in an expirable cache, all under the limiter's mutex.
type Tollbooth struct {
	lmt *tollboothlimiter.Limiter
}

// NewTollbooth returns a tollbooth limiter refilling r.Limit per r.Window
// with a burst of r.Limit. Its buckets expire after tollbooth's default of
// ten years.
func NewTollbooth(r Rate) (*Tollbooth, error) {
	if r.Limit <= 0 || r.Limit > math.MaxInt32 || r.Window <= 0 {
		return nil, fmt.Errorf("bench: tollbooth needs 0 < limit ≤ %d and a positive window, got %+v", math.MaxInt32, r)
	}
	lmt := tollbooth.NewLimiter(float64(r.Limit)/r.Window.Seconds(), nil)
	lmt.SetBurst(int(r.Limit))
	return &Tollbooth{lmt: lmt}, nil
}

// Allow takes a token from key's bucket.
func (t *Tollbooth) Allow(key string) (bool, error) {
	return tollbooth.LimitByKeys(t.lmt, []string{key}) == nil, nil
}

// Close does nothing: the cache has no goroutines.
func (t *Tollbooth) Close() {}

// UberRateLimit is go.uber.org/ratelimit: a single, unkeyed limiter that
// never denies but blocks in Take until the next request may go. It fits
// no keyed workload and no denied path; it is measured only on HotKey, as a
// floor for one limiter, at a rate at which Take never sleeps (see
// NewUberRateLimit). Allow ignores the key.
type UberRateLimit struct {
	rl ratelimit.Limiter
}

// NewUberRateLimit returns a limiter of perSecond requests a second. At a
// billion a second the next slot is always already past when Take is
// called, so Take returns without sleeping.
func NewUberRateLimit(perSecond int, opts ...ratelimit.Option) (*UberRateLimit, error) {
	if perSecond <= 0 {
		return nil, fmt.Errorf("bench: uber ratelimit needs a positive rate, got %d", perSecond)
	}
	return &UberRateLimit{rl: ratelimit.New(perSecond, opts...)}, nil
}

// Allow waits in Take for the limiter's next slot and returns true.
func (u *UberRateLimit) Allow(string) (bool, error) {
	u.rl.Take()
	return true, nil
}

// Close does nothing: the limiter has no goroutines.
func (u *UberRateLimit) Close() {}
