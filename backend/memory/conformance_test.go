package memory_test

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/memory"
)

func TestConformance(t *testing.T) {
	tests := []struct {
		name string
		opts *memory.Options
	}{
		{"defaults", nil},
		{"no sweeper", &memory.Options{SweepInterval: -1}},
		// One shard puts every key in one index and arena, so probe runs,
		// relocations and compactions all meet.
		{"one shard", &memory.Options{Shards: 1, SweepInterval: -1}},
		// A sweeper on a millisecond tick runs alongside every test.
		{"busy sweeper", &memory.Options{Shards: 4, SweepInterval: time.Millisecond, SweepBatch: 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			backendtest.Run(t, func(t *testing.T) backend.Backend {
				return memory.New(tt.opts)
			})
		})
	}
}
