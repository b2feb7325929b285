package pebble

import (
	"testing"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest/fulldisk"
)

// TestFullDisk: a full disk is a store error, said once, visible in the
// engine's health and counters, and Pebble's stuck database is reopened
// once there is room, with every spending kept in memory written.
func TestFullDisk(t *testing.T) {
	fulldisk.Run(t, fulldisk.Store{Open: func(dir string) (backend.Durable, error) {
		s, err := Open(dir, &Options{SweepInterval: -1, MemTableSize: 1 << 20})
		if err != nil {
			return nil, err
		}
		return s, nil
	}, OneEpisode: true})
}
