package bolt

import (
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
		Rounds: 90,
	})
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
		d, err := e.Apply(l, caller, 1)
		return d.Remaining, err
	}
	return decide, e.Close, nil
}
