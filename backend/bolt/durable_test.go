package bolt

import (
	"fmt"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
)

// durable is this store for the shared durable-store tests. Its
// configurations are "" (defaults, no sweeper) and "nosync"
// (Options.NoSync).
var durable = backendtest.Durable{
	Open: func(dir, config string) (backend.Backend, error) {
		opts := &Options{SweepInterval: -1}
		switch config {
		case "":
		case "nosync":
			opts.NoSync = true
		default:
			return nil, fmt.Errorf("unknown test configuration %q", config)
		}
		s, err := Open(dir, opts)
		if err != nil {
			return nil, err
		}
		return s, nil
	},
	// Synced, 600 single Puts cost 1200 fdatasyncs.
	Fast: "nosync",
	OpenSweeping: func(dir string, now func() int64) (backend.Backend, error) {
		s, err := Open(dir, &Options{SweepInterval: time.Millisecond, SweepBatch: 3, Now: now})
		if err != nil {
			return nil, err
		}
		return s, nil
	},
	// backend.Durable promises survival for a synced batch, and for an
	// unsynced one on a crash of the process; with Options.NoSync bbolt
	// keeps it too, even for single Puts, since its commits reach the page
	// cache through write(2).
	Crash: []backendtest.CrashCase{
		{Name: "batch-sync/NoSync=false", Writes: "batch-sync"},
		{Name: "batch-nosync/NoSync=false", Writes: "batch-nosync"},
		{Name: "batch-sync/NoSync=true", Config: "nosync", Writes: "batch-sync"},
		{Name: "batch-nosync/NoSync=true", Config: "nosync", Writes: "batch-nosync"},
		{Name: "put/NoSync=true", Config: "nosync", Writes: "put"},
	},
	PutRaw: func(b backend.Backend, key, stored []byte) error {
		return b.(*Store).db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(recordsBucket).Put(key, stored) })
	},
	BeforeDelete: func(b backend.Backend, hook func()) { b.(*Store).sweeper.BeforeDelete = hook },
}

// TestDurable runs the tests shared with the other durable stores.
func TestDurable(t *testing.T) { backendtest.RunDurable(t, durable) }

// TestHelperProcess is not a test: it is the child process of TestDurable's
// crash and lock tests.
func TestHelperProcess(t *testing.T) { backendtest.DurableChild(t, durable) }

// BenchmarkDurable runs the benchmarks shared with the other durable stores:
// GetPut and GetPutParallel also with Options.NoSync ("nosync").
func BenchmarkDurable(b *testing.B) { backendtest.BenchDurable(b, durable) }
