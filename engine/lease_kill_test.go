package engine_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/engine"
)

// leaseHolderEnv names, in a child process of TestLeasesOfAKilledProcess,
// the Pebble directory it takes its slots in.
const leaseHolderEnv = "SLUICE_TEST_LEASE_HOLDER"

// killedHold is the maximum hold of the slots the killed process takes.
const killedHold = 30 * time.Second

// TestLeasesOfAKilledProcess: a process takes every slot of a concurrency
// limit on a Pebble store (Sync durability: on disk before Acquire
// returns) and is killed with SIGKILL, releasing nothing. A process opening
// the store after it, on a clock that starts where the dead one's did,
// finds the slots held, and has them back, every one, once the maximum
// hold has passed: a dead holder leaks nothing for longer.
func TestLeasesOfAKilledProcess(t *testing.T) {
	if dir := os.Getenv(leaseHolderEnv); dir != "" {
		holdLeasesUntilKilled(t, dir)
		return
	}
	if testing.Short() {
		t.Skip("runs a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeasesOfAKilledProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), leaseHolderEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	held := false
	for lines.Scan() {
		if lines.Text() == "held" {
			held = true
			break
		}
	}
	cmd.Process.Kill() // SIGKILL: no release, no clean close
	cmd.Wait()
	if !held {
		t.Fatal("the child never held its slots")
	}

	clock := engine.NewFakeClock(t0)
	s, err := pebble.Open(dir, &pebble.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(t, s, clock)
	l := limit(algo.ConcurrencyName, algo.Params{Limit: 3, Window: killedHold}, "inflight")
	ctx := context.Background()
	ls, err := e.Acquire(ctx, l, "tenant")
	if err != nil || ls.Decision.Allowed || ls.Decision.RetryAfter != killedHold {
		t.Fatalf("a slot while the dead process's leases last: %+v, %v", ls, err)
	}
	clock.Advance(killedHold - 1)
	if ls, _ := e.Acquire(ctx, l, "tenant"); ls.Decision.Allowed {
		t.Fatal("a slot came back before the maximum hold")
	}
	clock.Advance(1)
	for i := range 3 {
		if ls, err := e.Acquire(ctx, l, "tenant"); err != nil || !ls.Decision.Allowed {
			t.Fatalf("slot %d after the hold: %+v, %v", i, ls, err)
		}
	}
}

// holdLeasesUntilKilled is the child: it takes every slot, says so, and
// waits to be killed.
func holdLeasesUntilKilled(t *testing.T, dir string) {
	s, err := pebble.Open(dir, &pebble.Options{SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(s, &engine.Options{Clock: engine.NewFakeClock(t0), Durability: engine.Sync})
	if err != nil {
		t.Fatal(err)
	}
	l := limit(algo.ConcurrencyName, algo.Params{Limit: 3, Window: killedHold}, "inflight")
	for range 3 {
		if ls, err := e.Acquire(context.Background(), l, "tenant"); err != nil || !ls.Decision.Allowed {
			t.Fatalf("%+v, %v", ls, err)
		}
	}
	os.Stdout.WriteString("held\n")
	select {}
}
