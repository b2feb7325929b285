package engine_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
)

// A flood of new keys into a memory store capped by MaxKeys is refused with
// ErrStore wrapping backend.ErrFull once the store is full; it never evicts
// the victim, whose spent budget and RetryAfter stay exactly as they were.
// Once the flood's keys expire and are swept, new keys are admitted again
// and the victim is still denied.
func TestFloodCannotResetVictim(t *testing.T) {
	const maxKeys = 100
	clock := engine.NewFakeClock(t0)
	store := memory.New(&memory.Options{MaxKeys: maxKeys, SweepInterval: -1, Now: clock.Now})
	e, err := engine.New(store, &engine.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })

	victim := engine.Limit{Namespace: "login", Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 3, Window: time.Hour})}
	flood := engine.Limit{Namespace: "per-ip", Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 1, Window: time.Second})}
	var spent algo.Decision
	for i := range 4 {
		if spent, err = e.Apply(context.Background(), victim, "user:victim", 1); err != nil {
			t.Fatal(err)
		}
		if got, want := spent.Allowed, i < 3; got != want {
			t.Fatalf("victim request %d: allowed %v, want %v", i+1, got, want)
		}
	}
	checkVictim := func(when string, wantRetry time.Duration) {
		t.Helper()
		d, err := e.Peek(context.Background(), victim, "user:victim", 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed || d.Remaining != 0 || d.RetryAfter != wantRetry {
			t.Fatalf("%s: victim allowed %v, remaining %d, retry after %v; want denied, 0, %v",
				when, d.Allowed, d.Remaining, d.RetryAfter, wantRetry)
		}
	}

	floodKeys := func(from, n int) (admitted, refused int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			d, err := e.Apply(context.Background(), flood, "ip:2001:db8:"+strconv.Itoa(i)+"::/64", 1)
			switch {
			case err == nil && d.Allowed:
				admitted++
			case errors.Is(err, backend.ErrFull) && errors.Is(err, engine.ErrStore):
				refused++
			default:
				t.Fatalf("flood key %d: allowed %v, error %v; want allowed or ErrFull", i, d.Allowed, err)
			}
			if n := e.Len(); n > maxKeys {
				t.Fatalf("flood key %d: the store holds %d keys, over MaxKeys %d", i, n, maxKeys)
			}
		}
		return admitted, refused
	}

	admitted, refused := floodKeys(0, 1000)
	if admitted != maxKeys-1 || refused != 1000-(maxKeys-1) {
		t.Fatalf("first flood: %d admitted, %d refused; want %d and %d", admitted, refused, maxKeys-1, 1000-(maxKeys-1))
	}
	checkVictim("during the flood", spent.RetryAfter)

	// The flood's keys expire a second after they arrived; once swept,
	// there is room for new keys again, and still none for the victim.
	clock.Advance(2 * time.Second)
	if removed, err := e.Sweep(math.MaxInt); err != nil || removed != maxKeys-1 {
		t.Fatalf("Sweep removed %d keys, %v; want the %d flood keys", removed, err, maxKeys-1)
	}
	admitted, refused = floodKeys(1000, 1000)
	if admitted != maxKeys-1 || refused != 1000-(maxKeys-1) {
		t.Fatalf("second flood: %d admitted, %d refused; want %d and %d", admitted, refused, maxKeys-1, 1000-(maxKeys-1))
	}
	checkVictim("after a second flood", spent.RetryAfter-2*time.Second)
	if got := e.Stats().StoreErrors; got != uint64(2*(1000-(maxKeys-1))) {
		t.Errorf("StoreErrors = %d, want one per refused key, %d", got, 2*(1000-(maxKeys-1)))
	}
}
