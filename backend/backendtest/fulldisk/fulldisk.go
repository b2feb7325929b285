package fulldisk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/engine"
)

// Size is the size of the file system Run fills: room for a store and its
// first writes.
const Size = 8 << 20

// Store says how Run opens the store under test.
type Store struct {
	// Open opens the store in dir, with no background sweeper.
	Open func(dir string) (backend.Durable, error)
	// OneEpisode says that every write fails until the disk has room, so
	// that the failure is one episode. A store that takes some writes on
	// a full disk (bbolt reuses its free pages) may end an episode and
	// start another; each is still logged once at each end.
	OneEpisode bool
}

// Lines from the engine's log that start and end an episode of failing
// writes.
const (
	startLine = "the durable store fails to write"
	endLine   = "the durable store writes again"
)

// flushInterval is the engine's flush interval in the test: how often it
// retries writing.
const flushInterval = 10 * time.Millisecond

// recoverWithin bounds the wait for the store to write again once the disk
// has room: generous, for a loaded machine; the store tries every
// flushInterval (Pebble reopens at most twice a second).
const recoverWithin = 60 * time.Second

// t0 is the fake clock's time: frozen, so a token bucket never refills and
// what a key has spent is its capacity less what remains.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Run runs the full-disk test of a durable store under the engine, in each
// durability mode, on a tmpfs of Size bytes (skipped where it cannot be
// mounted): decisions are made on keys held in memory and on new ones
// until the disk is full and writes fail, and go on during the failure;
// then the disk is freed.
//
// While the disk is full: every error a decision returns wraps
// engine.ErrStore and backend.ErrNoSpace (nothing panics, nothing exits);
// the engine's StoreHealth says not ready, naming the store's path, and
// its Stats say the store is failing and count the failed writes; the log
// has one line saying so. Once the disk has room, the engine writes again
// by itself, without a reopen by the caller, within recoverWithin; the log
// has one line saying so; and every spending made before and during the
// failure, kept in memory, is on disk: read through the store under the
// live engine, and again after closing and reopening it.
func Run(t *testing.T, s Store) {
	for _, mode := range []engine.Durability{engine.Interval, engine.Sync} {
		t.Run(mode.String(), func(t *testing.T) { run(t, s, mode) })
	}
}

// lineLog collects the engine's log lines.
type lineLog struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// count returns the number of lines holding s, and those lines.
func (l *lineLog) count(s string) (int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var got []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.Contains(line, s) {
			got = append(got, line)
		}
	}
	return len(got), got
}

const capacity = 1 << 20

var limit = engine.Limit{Namespace: "full", Algorithm: algo.MustNew("token_bucket", algo.Params{Limit: capacity, Window: time.Hour})}

// padding makes keys long, so that a few decisions need a new page of the
// store's files.
var padding = strings.Repeat("x", 200)

func run(t *testing.T, s Store, mode engine.Durability) {
	root := Mount(t, Size)
	dir := filepath.Join(root, "store")
	clock := engine.NewFakeClock(t0)
	logs := &lineLog{}
	opts := &engine.Options{Durability: mode, FlushInterval: flushInterval, Clock: clock,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}
	st, err := s.Open(dir)
	if err != nil {
		t.Fatalf("opening the store: %v", err)
	}
	e, err := engine.New(st, opts)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			e.Close()
		}
	}()

	spent := map[string]int64{} // what each key has spent, by the decisions' outcomes
	var keys []string
	decide := func(key string) error {
		if _, ok := spent[key]; !ok {
			keys = append(keys, key)
			spent[key] = 0
		}
		d, err := e.Apply(context.Background(), limit, key, 1)
		switch {
		case err == nil:
			if !d.Allowed {
				t.Fatalf("Apply(%q) denied: %+v", key, d)
			}
			spent[key]++
		case strings.Contains(err.Error(), "store: write: "):
			// The decision was made and its spending kept in memory;
			// the write behind it failed.
			spent[key]++
		}
		return err
	}
	hot := func(i int) string { return fmt.Sprintf("hot-%d-%s", i, padding) }
	for i := range 10 {
		if err := decide(hot(i)); err != nil {
			t.Fatalf("before the disk is full: %v", err)
		}
	}
	waitWritten(t, e, "before the disk is full")

	filler := Fill(t, root)
	var errs []error
	n := 0
	for ; n < 100000 && len(errs) < 20; n++ {
		// A key held in memory, and a new one.
		for _, k := range []string{hot(n % 10), fmt.Sprintf("new-%d-%s", n, padding)} {
			if err := decide(k); err != nil {
				errs = append(errs, err)
			}
		}
		if mode == engine.Interval && n%20 == 19 {
			time.Sleep(flushInterval) // let the flusher meet the full disk
		}
	}
	if len(errs) == 0 {
		t.Fatalf("%d decisions on a full disk met no error", 2*n)
	}
	for _, err := range errs {
		if !errors.Is(err, engine.ErrStore) || !errors.Is(err, backend.ErrNoSpace) {
			t.Fatalf("a decision on a full disk returned %v; want an error wrapping engine.ErrStore and backend.ErrNoSpace", err)
		}
	}
	herr := e.StoreHealth()
	if herr == nil || !errors.Is(herr, backend.ErrNoSpace) || !strings.Contains(herr.Error(), dir) {
		t.Fatalf("StoreHealth() on a full disk = %v; want an error wrapping backend.ErrNoSpace naming %s", herr, dir)
	}
	stats := e.Stats()
	if !stats.StoreFailing || stats.StoreFailures == 0 || stats.FlushErrors+stats.CommitErrors == 0 {
		t.Fatalf("Stats() on a full disk: StoreFailing %v, StoreFailures %d, FlushErrors %d, CommitErrors %d; want true, an episode, and failed writes counted",
			stats.StoreFailing, stats.StoreFailures, stats.FlushErrors, stats.CommitErrors)
	}
	// The failure goes on: more decisions, each one more failed write.
	for i := range 30 {
		decide(hot(i % 10))
		if mode == engine.Interval {
			time.Sleep(flushInterval / 5)
		}
	}
	episodes := e.Stats().StoreFailures
	if s.OneEpisode && episodes != 1 {
		t.Fatalf("%d episodes of failing writes on a full disk, want 1", episodes)
	}
	if got, lines := logs.count(startLine); uint64(got) != episodes || !strings.Contains(lines[0], dir) {
		t.Fatalf("the log has %d lines saying the store fails to write, want %d (one per episode) naming %s: %q", got, episodes, dir, lines)
	}
	if got, _ := logs.count(endLine); uint64(got) != episodes-1 {
		t.Fatalf("the log says %d times that the store writes again while the disk is full and %d episodes started", got, episodes)
	}
	t.Logf("%s: %d decisions, %d failed writes (flushes %d, commits %d) before freeing the disk; health: %v",
		mode, len(keys), e.Stats().FlushErrors+e.Stats().CommitErrors, e.Stats().FlushErrors, e.Stats().CommitErrors, herr)

	Free(t, filler)
	freed := time.Now()
	waitWritten(t, e, "once the disk has room")
	t.Logf("%s: writing again, nothing dirty, %v after the disk had room", mode, time.Since(freed).Round(time.Millisecond))
	if got, lines := logs.count(endLine); uint64(got) != episodes {
		t.Fatalf("the log has %d lines saying the store writes again, want %d (one per episode): %q", got, episodes, lines)
	}
	if got, _ := logs.count(startLine); uint64(got) != episodes {
		t.Fatalf("the log has %d lines saying the store fails to write, want %d", got, episodes)
	}

	// Every spending is on disk, read through the store under the live
	// engine (which has flushed it by itself), ...
	now := clock.Now()
	disk := e.Backend().(backend.Durable)
	for _, k := range keys {
		rec, _, err := disk.Load(engine.AppendKey(nil, limit.Namespace, k), now)
		if err != nil {
			t.Fatalf("Load(%q) after the disk has room: %v", short(k), err)
		}
		if got := spentIn(rec, now); got != spent[k] {
			t.Fatalf("%q: the disk's record has spent %d, want %d (%s)", short(k), got, spent[k], lateOrLost(e, disk, k, now))
		}
	}
	// ... and after a restart.
	closed = true
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	st, err = s.Open(dir)
	if err != nil {
		t.Fatalf("reopening the store: %v", err)
	}
	e2, err := engine.New(st, opts)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	defer e2.Close()
	for _, k := range keys {
		d, err := e2.Peek(context.Background(), limit, k, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := capacity - d.Remaining - 1; got != spent[k] {
			t.Fatalf("%q after reopening: spent %d, want %d", short(k), got, spent[k])
		}
	}
}

// lateOrLost tells, for a key whose disk record lacks a spending, whether
// the spending was still on its way (an explicit flush writes it: the
// engine said "nothing dirty" while a write was in flight) or is lost (the
// engine's memory does not have it either, or the disk refuses it), with
// the engine's counters, so that a failure says which it was.
func lateOrLost(e *engine.Engine, disk backend.Durable, k string, now int64) string {
	s := e.Stats()
	ferr := e.Flush(context.Background())
	rec, _, err := disk.Load(engine.AppendKey(nil, limit.Namespace, k), now)
	mem, perr := e.Peek(context.Background(), limit, k, 1)
	return fmt.Sprintf("after an explicit flush (%v) the disk's record has spent %d (load error %v), the engine's memory %d (peek error %v); stats before it: %+v",
		ferr, spentIn(rec, now), err, capacity-mem.Remaining-1, perr, s)
}

// waitWritten waits until the engine's store takes writes and nothing
// awaits a write.
func waitWritten(t *testing.T, e *engine.Engine, when string) {
	t.Helper()
	deadline := time.Now().Add(recoverWithin)
	for {
		s := e.Stats()
		herr := e.StoreHealth()
		if herr == nil && !s.StoreFailing && s.Dirty == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after %v the store still fails to write (health %v, %d records dirty)", when, recoverWithin, herr, s.Dirty)
		}
		time.Sleep(flushInterval)
	}
}

// spentIn returns what the record rec has spent at now: the capacity less
// what a request of 1 would leave, less that request.
func spentIn(rec []byte, now int64) int64 {
	if rec == nil {
		return 0
	}
	_, d := limit.Algorithm.Step(append([]byte(nil), rec...), now, 1)
	return capacity - d.Remaining - 1
}

func short(k string) string { return strings.TrimSuffix(k, "-"+padding) }
