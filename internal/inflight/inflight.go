// Package inflight holds what the in-flight doors (httplimit's and
// grpclimit's InFlight) check of their configuration alike: the engine,
// a concurrency limit, the Retry-After a denial is told and the policy on
// a store error.
package inflight

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/internal/ratefield"
)

// Check reports what is wrong with an InFlightConfig of the door named by
// prefix ("sluice/httplimit"), or returns whether a store error refuses
// the request (FailClosed) and the Retry-After field of a denial (zero
// retryAfter: sluice.DefaultRetryAfter).
func Check(prefix string, eng *engine.Engine, limit engine.Limit, retryAfter time.Duration, onStoreError sluice.StoreErrorPolicy) (closed bool, retry string, err error) {
	switch {
	case eng == nil:
		return false, "", errors.New(prefix + ": InFlightConfig.Engine is required")
	case limit.Algorithm == nil || limit.Algorithm.Name() != algo.ConcurrencyName:
		return false, "", fmt.Errorf("%s: InFlightConfig.Limit: want a %s limit", prefix, algo.ConcurrencyName)
	case retryAfter < 0:
		return false, "", fmt.Errorf("%s: InFlightConfig.RetryAfter: must not be negative, got %v", prefix, retryAfter)
	}
	switch onStoreError {
	case "", sluice.FailOpen:
	case sluice.FailClosed:
		closed = true
	default:
		return false, "", fmt.Errorf("%s: InFlightConfig.OnStoreError %q: want %q or %q", prefix, onStoreError, sluice.FailOpen, sluice.FailClosed)
	}
	if retryAfter == 0 {
		retryAfter = sluice.DefaultRetryAfter
	}
	return closed, strconv.FormatInt(ratefield.RetryAfterSeconds(algo.Decision{RetryAfter: retryAfter}), 10), nil
}
