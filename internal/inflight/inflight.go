// Package inflight holds what the in-flight doors (httplimit's and
// grpclimit's InFlight) check of their configuration alike: the engine,
// a concurrency limit, the Retry-After a denial is told and the policy on
// a store error. The doors take and give back their slots through the
// sluice.Decider Check returns, as the rules doors do through theirs
// (sluice.Door.Release): one release path (a context that outlives the
// request's, bounded by sluice.ReleaseTimeout) and one paced log line for
// a store error.
package inflight

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/internal/ratefield"
)

// Check reports what is wrong with an InFlightConfig of the door named by
// prefix ("sluice/httplimit"), or returns the Decider the door takes and
// gives back its slots through (its store-error policy onStoreError, its
// log lines to log, nil meaning slog.Default()) and the Retry-After field
// of a denial (zero retryAfter: sluice.DefaultRetryAfter).
func Check(prefix string, eng *engine.Engine, limit engine.Limit, retryAfter time.Duration, onStoreError sluice.StoreErrorPolicy, log *slog.Logger) (core *sluice.Decider, retry string, err error) {
	switch {
	case eng == nil:
		return nil, "", errors.New(prefix + ": InFlightConfig.Engine is required")
	case limit.Algorithm == nil || limit.Algorithm.Name() != algo.ConcurrencyName:
		return nil, "", fmt.Errorf("%s: InFlightConfig.Limit: want a %s limit", prefix, algo.ConcurrencyName)
	case retryAfter < 0:
		return nil, "", fmt.Errorf("%s: InFlightConfig.RetryAfter: must not be negative, got %v", prefix, retryAfter)
	}
	switch onStoreError {
	case "", sluice.FailOpen, sluice.FailClosed:
	default:
		return nil, "", fmt.Errorf("%s: InFlightConfig.OnStoreError %q: want %q or %q", prefix, onStoreError, sluice.FailOpen, sluice.FailClosed)
	}
	core, err = sluice.NewDecider(sluice.DeciderConfig{Name: prefix, Engine: eng, OnStoreError: onStoreError, Logger: log})
	if err != nil {
		return nil, "", err
	}
	if retryAfter == 0 {
		retryAfter = sluice.DefaultRetryAfter
	}
	return core, strconv.FormatInt(ratefield.RetryAfterSeconds(algo.Decision{RetryAfter: retryAfter}), 10), nil
}
