package pebble_test

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/pebble"
)

func TestConformance(t *testing.T) {
	tests := []struct {
		name string
		opts *pebble.Options
	}{
		{"defaults", nil},
		// A sweeper on a millisecond tick runs alongside every test. The
		// suite's clock is an hour ahead of the sweeper's, so it never
		// removes a record the suite considers live.
		{"busy sweeper", &pebble.Options{SweepInterval: time.Millisecond, SweepBatch: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			backendtest.Run(t, func(t *testing.T) backend.Backend {
				s, err := pebble.Open(t.TempDir(), tt.opts)
				if err != nil {
					t.Fatalf("Open() = %v", err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			})
		})
	}
}
