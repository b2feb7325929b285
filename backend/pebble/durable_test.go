package pebble

import (
	"fmt"
	"testing"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
)

// syncerInterval is Options.SyncInterval in the "syncer" configuration.
const syncerInterval = 20 * time.Millisecond

// durable is this store for the shared durable-store tests. Its
// configurations are "" (defaults, no sweeper) and "syncer" (the log synced
// every syncerInterval).
var durable = backendtest.Durable{
	Open: func(dir, config string) (backend.Backend, error) {
		opts := &Options{SweepInterval: -1}
		switch config {
		case "":
		case "syncer":
			opts.SyncInterval = syncerInterval
		default:
			return nil, fmt.Errorf("unknown test configuration %q", config)
		}
		s, err := Open(dir, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	},
	OpenSweeping: func(dir string, now func() int64) (backend.Backend, error) {
		s, err := Open(dir, &Options{SweepInterval: time.Millisecond, SweepBatch: 3, Now: now})
		if err != nil {
			return nil, err
		}
		return s, nil
	},
	// A batch survives a SIGKILL with sync set, and without it for a crash
	// of the process; unsynced Puts survive once the syncer has had ten
	// intervals to run.
	Crash: []backendtest.CrashCase{
		{Name: "batch-sync", Config: "syncer", Writes: "batch-sync"},
		{Name: "batch-nosync", Config: "syncer", Writes: "batch-nosync"},
		{Name: "put-wait", Config: "syncer", Writes: "put", Wait: 10 * syncerInterval},
	},
	PutRaw: func(b backend.Backend, key, stored []byte) error {
		return b.(*Store).db.Set(append([]byte{recordPrefix}, key...), stored, pebbledb.Sync)
	},
	BeforeDelete: func(b backend.Backend, hook func()) { b.(*Store).sweeper.BeforeDelete = hook },
}

// TestDurable runs the tests shared with the other durable stores.
func TestDurable(t *testing.T) { backendtest.RunDurable(t, durable) }

// TestHelperProcess is not a test: it is the child process of TestDurable's
// crash and lock tests.
func TestHelperProcess(t *testing.T) { backendtest.DurableChild(t, durable) }

// BenchmarkDurable runs the benchmarks shared with the other durable stores.
func BenchmarkDurable(b *testing.B) { backendtest.BenchDurable(b, durable) }
