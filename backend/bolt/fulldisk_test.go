package bolt

import (
	"testing"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest/fulldisk"
)

// TestFullDisk: a full disk is a store error, said once, visible in the
// engine's health and counters, and the store writes again by itself once
// there is room, with every spending kept in memory written.
func TestFullDisk(t *testing.T) {
	fulldisk.Run(t, fulldisk.Store{Open: func(dir string) (backend.Durable, error) {
		s, err := Open(dir, &Options{SweepInterval: -1})
		if err != nil {
			return nil, err
		}
		return s, nil
	}})
}
