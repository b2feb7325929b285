package pebble

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/engine"
)

// damageRounds is n, or half of it under the race detector, where each
// round costs several times more and finds no race the first half does
// not (the rounds differ in the bytes damaged, not in what runs
// concurrently); make full runs all n in a normal build. (Half keeps each
// kind of file damaged and met at least twice.)
func damageRounds(n int) int {
	if raceEnabled {
		return n / 2
	}
	return n
}

// Pebble files with bytes flipped or overwritten — sst blocks, the
// MANIFEST, the WAL, OPTIONS — never panic or end the process: open,
// reads, writes, sweep, range and close each succeed or fail with an
// error wrapping backend.ErrCorrupt.
func TestDamagedFiles(t *testing.T) {
	backendtest.Damaged(t, backendtest.Damage{
		Open: func(dir string) (backend.Backend, error) {
			return Open(dir, &Options{SweepInterval: -1, SyncInterval: -1, MemTableSize: 64 << 10})
		},
		Files: func(dir string) []backendtest.Target {
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var out []backendtest.Target
			for _, e := range entries {
				name := e.Name()
				kind := ""
				switch {
				case strings.HasSuffix(name, ".sst"):
					kind = "sst"
				case strings.HasPrefix(name, "MANIFEST-"):
					kind = "MANIFEST"
				case strings.HasSuffix(name, ".log"):
					kind = "WAL"
				case strings.HasPrefix(name, "OPTIONS-"):
					kind = "OPTIONS"
				}
				if kind == "" {
					continue
				}
				if info, err := os.Stat(filepath.Join(dir, name)); err != nil || info.Size() == 0 {
					continue
				}
				out = append(out, backendtest.Target{Kind: kind, Path: name})
			}
			sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
			// The newest log is the live WAL, which Open replays; older
			// ones are kept only to be recycled, and Open never reads
			// them.
			live := -1
			for i, tg := range out {
				if tg.Kind == "WAL" {
					out[i].Kind, live = "recycled WAL", i
				}
			}
			if live >= 0 {
				out[live].Kind = "WAL"
			}
			return out
		},
		Engine: damageEngine,
		Kinds:  []string{"sst", "MANIFEST", "WAL"},
		Rounds: damageRounds(60),
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
		d, err := e.Apply(context.Background(), l, caller, 1)
		return d.Remaining, err
	}
	return decide, e.Close, nil
}
