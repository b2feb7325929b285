// Package inflight holds what the in-flight doors (httplimit's and
// grpclimit's InFlight) do alike: check their configuration (the engine, a
// concurrency limit, the Retry-After a denial is told, the policy on a
// store error), check a caller's key, and take, count and give back a
// request's slot (Gate). The doors keep only their protocol: the key of a
// request, and the answer to each verdict. A Gate takes and gives back its
// slots through a sluice.Decider, as the rules doors do through theirs
// (sluice.Door.Release): one release path (a context that outlives the
// request's, bounded by sluice.ReleaseTimeout) and one paced log line for
// a store error.
package inflight

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/internal/ratefield"
)

// Gate holds the slots of one concurrency limit for an in-flight door. It
// is safe for concurrent use.
type Gate struct {
	core  *sluice.Decider // takes and gives back the slots, logs store errors
	limit engine.Limit
	retry string
	held  atomic.Int64
}

// New reports what is wrong with an InFlightConfig of the door named by
// prefix ("sluice/httplimit"), or returns the Gate of limit on eng: its
// store-error policy onStoreError, its log lines to log (nil meaning
// slog.Default()), a denial told retryAfter (zero:
// sluice.DefaultRetryAfter).
func New(prefix string, eng *engine.Engine, limit engine.Limit, retryAfter time.Duration, onStoreError sluice.StoreErrorPolicy, log *slog.Logger) (*Gate, error) {
	switch {
	case eng == nil:
		return nil, errors.New(prefix + ": InFlightConfig.Engine is required")
	case limit.Algorithm == nil || limit.Algorithm.Name() != algo.ConcurrencyName:
		return nil, fmt.Errorf("%s: InFlightConfig.Limit: want a %s limit", prefix, algo.ConcurrencyName)
	case retryAfter < 0:
		return nil, fmt.Errorf("%s: InFlightConfig.RetryAfter: must not be negative, got %v", prefix, retryAfter)
	}
	switch onStoreError {
	case "", sluice.FailOpen, sluice.FailClosed:
	default:
		return nil, fmt.Errorf("%s: InFlightConfig.OnStoreError %q: want %q or %q", prefix, onStoreError, sluice.FailOpen, sluice.FailClosed)
	}
	core, err := sluice.NewDecider(sluice.DeciderConfig{Name: prefix, Engine: eng, OnStoreError: onStoreError, Logger: log})
	if err != nil {
		return nil, err
	}
	if retryAfter == 0 {
		retryAfter = sluice.DefaultRetryAfter
	}
	retry := strconv.FormatInt(ratefield.RetryAfterSeconds(algo.Decision{RetryAfter: retryAfter}), 10)
	return &Gate{core: core, limit: limit, retry: retry}, nil
}

// RetryAfter returns the Retry-After field a denial is told: whole
// seconds, at least 1.
func (g *Gate) RetryAfter() string { return g.retry }

// Held returns the slots taken (Take, Allowed) and not yet given back.
func (g *Gate) Held() int64 { return g.held.Load() }

// Key returns key and err, a door's key function's answer, with a key
// longer than identity.MaxKeyLen made an error matching
// identity.ErrBadIdentity.
func Key(key string, err error) (string, error) {
	if err == nil && len(key) > identity.MaxKeyLen {
		err = fmt.Errorf("%w: a key of %d bytes, over %d", identity.ErrBadIdentity, len(key), identity.MaxKeyLen)
	}
	return key, err
}

// Take takes a slot for key into *ls and says what became of the
// request: sluice.Allowed, the slot held until Release(ctx, ls); Denied,
// every slot taken; and, the store having failed, Passed (FailOpen: on,
// holding no slot), Unavailable (FailClosed, or ctx ended) or Failed (an
// error that is not the store's, logged by the Decider).
func (g *Gate) Take(ctx context.Context, key string, ls *engine.Lease) sluice.Verdict {
	if err := g.core.Acquire(ctx, g.limit.Namespace, g.limit, key, ls); err != nil {
		return g.core.ErrVerdict(ctx, err)
	}
	if !ls.Decision.Allowed {
		return sluice.Denied
	}
	g.held.Add(1)
	return sluice.Allowed
}

// Release gives back the slot Take held in *ls.
func (g *Gate) Release(ctx context.Context, ls *engine.Lease) {
	g.held.Add(-1)
	g.core.Release(ctx, g.limit.Namespace, ls)
}
