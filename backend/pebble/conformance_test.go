package pebble_test

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/pebble"
)

// TestConformance: a sweeper on a millisecond tick runs alongside every
// test. The suite's clock is an hour ahead of the sweeper's, so it never
// removes a record the suite considers live.
func TestConformance(t *testing.T) {
	conformance(t, &pebble.Options{SweepInterval: time.Millisecond, SweepBatch: 7})
}

// TestConformanceDefaults: the suite on the default options. Under the
// race detector it is skipped: TestConformance runs the same calls on the
// same code with a sweeper beside them, a superset of what the detector
// can see here, and make full runs this one in a normal build.
func TestConformanceDefaults(t *testing.T) {
	if pebble.RaceEnabled {
		t.Skip("the race detector is on: TestConformance covers these calls with a sweeper beside them; make full runs this")
	}
	conformance(t, nil)
}

func conformance(t *testing.T, opts *pebble.Options) {
	t.Parallel()
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		s, err := pebble.Open(t.TempDir(), opts)
		if err != nil {
			t.Fatalf("Open() = %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
