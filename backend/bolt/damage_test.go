package bolt

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/engine"
)

// A bbolt file with bytes flipped or overwritten anywhere — its two meta
// pages, the freelist, branch and leaf pages — never panics or ends the
// process: open, reads, writes, sweep, range and close each succeed or
// fail with an error wrapping backend.ErrCorrupt.
func TestDamagedFile(t *testing.T) {
	page := int64(os.Getpagesize())
	backendtest.Damaged(t, backendtest.Damage{
		Open: func(dir string) (backend.Backend, error) { return Open(dir, &Options{SweepInterval: -1}) },
		Files: func(dir string) []backendtest.Target {
			return []backendtest.Target{
				{Kind: "meta page", Path: FileName, From: 0, Upto: 2 * page},
				{Kind: "data pages", Path: FileName, From: 2 * page},
				{Kind: "anywhere", Path: FileName},
			}
		},
		Engine: damageEngine,
		Kinds:  []string{"meta page", "data pages"},
		Rounds: damageRounds(90),
	})
}

// damageRounds is n, or half of it under the race detector, where each
// round costs several times more and finds no race the first half does
// not (the rounds differ in the bytes damaged, not in what runs
// concurrently); make full runs all n in a normal build. (A quarter of 90
// met no meta page's damage: bbolt reads the other meta page.)
func damageRounds(n int) int {
	if raceEnabled {
		return n / 2
	}
	return n
}

// damageEngine wraps b in a rate-limit engine (its default durability,
// Interval, as a gateway runs it) and returns a token bucket's decision for
// a caller, with what it has left, and the engine's Close.
func damageEngine(b backend.Backend) (func(string) (int64, error), func() error, error) {
	e, err := engine.New(b, nil)
	if err != nil {
		return nil, nil, err
	}
	l := engine.Limit{Namespace: "damage", Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 10, Window: 24 * time.Hour})}
	decide := func(caller string) (int64, error) {
		d, err := e.Apply(context.Background(), l, caller, 1)
		return d.Remaining, err
	}
	return decide, e.Close, nil
}

// TestOrderedCursorRefusesAKeyGoingBack: a walk's keys must rise from the
// key it started at; one at or before the last, or before the start, is
// the damage of pages that send the cursor back, and the walk stops there
// with an error rather than loop.
func TestOrderedCursorRefusesAKeyGoingBack(t *testing.T) {
	for _, tt := range []struct {
		from []byte
		keys []string
		ok   int // how many keys pass before the error; len(keys): all
	}{
		{nil, []string{"a", "b", "c"}, 3},
		{[]byte("b"), []string{"b", "c"}, 2},
		{[]byte("b"), []string{"a"}, 0},
		{nil, []string{"a", "c", "b"}, 2},
		{nil, []string{"a", "a"}, 1},
	} {
		o := orderedCursor{from: tt.from, size: 1 << 20}
		passed := 0
		for _, k := range tt.keys {
			if _, _, err := o.check([]byte(k), []byte("v")); err != nil {
				if !errors.Is(err, errDisorder) {
					t.Errorf("from %q, keys %q: %v is not errDisorder", tt.from, tt.keys, err)
				}
				break
			}
			passed++
		}
		if passed != tt.ok {
			t.Errorf("from %q, keys %q: %d passed, want %d", tt.from, tt.keys, passed, tt.ok)
		}
	}
}
