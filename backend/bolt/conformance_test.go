package bolt_test

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/bolt"
)

func TestConformance(t *testing.T) {
	tests := []struct {
		name string
		opts *bolt.Options
	}{
		// Synced commits cost two fdatasyncs each, and the suite makes
		// tens of thousands of them: it runs unsynced, which changes no
		// answer (the synced default is exercised by the persistence and
		// crash tests). A sweeper on a millisecond tick runs alongside
		// every test; the suite's clock is an hour ahead of the sweeper's,
		// so it never removes a record the suite considers live. (One
		// variant only: bbolt is slow under -race.)
		{"no sync, busy sweeper", &bolt.Options{NoSync: true, SweepInterval: time.Millisecond, SweepBatch: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			backendtest.Run(t, func(t *testing.T) backend.Backend {
				s, err := bolt.Open(t.TempDir(), tt.opts)
				if err != nil {
					t.Fatalf("Open() = %v", err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			})
		})
	}
}
