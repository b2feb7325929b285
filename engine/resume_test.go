package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// TestResume settles, through Resume, reservations that a Reserve made in
// another call: the spend then equals one made with the Reservation itself,
// an estimate of 0 charges the whole actual cost past the limit, and each
// resumed reservation settles once.
func TestResume(t *testing.T) {
	ctx := context.Background()
	l := engine.Limit{Namespace: "tpm", Algorithm: algo.MustNew(algo.SlidingCounterName, algo.Params{Limit: 100, Window: time.Minute})}
	clock := engine.NewFakeClock(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	e := newEngine(t, memory.New(nil), clock)

	r, err := e.Reserve(ctx, l, "k", 60)
	if err != nil || !r.Decision.Allowed {
		t.Fatalf("Reserve(60) = %+v, %v", r, err)
	}
	clock.Advance(time.Second)
	resumed := e.Resume(l, "k", r.Estimate, r.At)
	s, err := resumed.Settle(ctx, 20)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Refunded, int64(40); got != want {
		t.Fatalf("refunded %d, want %d", got, want)
	}
	if got, want := s.Decision.Remaining, int64(80); got != want {
		t.Fatalf("remaining after the refund %d, want %d", got, want)
	}
	if _, err := resumed.Settle(ctx, 20); err != engine.ErrSettled {
		t.Fatalf("a second Settle: %v, want ErrSettled", err)
	}
	// A charge of the whole cost, past the limit: 20 + 150 is 70 past it.
	s, err = e.Resume(l, "k", 0, clock.Now()).Settle(ctx, 150)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Charged, int64(150); got != want || s.Decision.Remaining != 0 {
		t.Fatalf("charged %d remaining %d, want %d and 0", got, s.Decision.Remaining, want)
	}
	if d, err := e.Peek(ctx, l, "k", 1); err != nil || d.Allowed {
		t.Fatalf("in debt: Peek = %+v, %v; want a denial", d, err)
	}
}
