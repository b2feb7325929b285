package engine

import (
	"context"
	"slices"
	"testing"
	"time"
)

type ctxKey struct{}

// sharedCtx: one caller's cancellation does not end the shared context;
// its deadline is the latest of the callers' when each has one, and none
// when one has none; it carries the first caller's values.
func TestSharedCtx(t *testing.T) {
	base := context.WithValue(t.Context(), ctxKey{}, "first")
	early, stopEarly := context.WithDeadline(base, time.Unix(1_700_000_000, 0))
	defer stopEarly()
	late, stopLate := context.WithDeadline(t.Context(), time.Unix(1_800_000_000, 0))
	defer stopLate()
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tc := range []struct {
		name     string
		ctxs     []context.Context
		deadline time.Time // zero: none
	}{
		{"deadlines", []context.Context{early, late}, time.Unix(1_800_000_000, 0)},
		{"one without", []context.Context{early, cancelled}, time.Time{}},
	} {
		ctx, release := sharedCtx(slices.Values(tc.ctxs))
		d, ok := ctx.Deadline()
		if ok != !tc.deadline.IsZero() || !d.Equal(tc.deadline) {
			t.Errorf("%s: deadline %v, %v; want %v", tc.name, d, ok, tc.deadline)
		}
		if tc.name == "one without" && ctx.Err() != nil {
			t.Errorf("%s: ended by one caller's cancellation: %v", tc.name, ctx.Err())
		}
		if v := ctx.Value(ctxKey{}); v != "first" {
			t.Errorf("%s: value %v, want the first caller's", tc.name, v)
		}
		release()
	}
}
