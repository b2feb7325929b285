// Package walk holds the loops the durable stores (backend/bolt and
// backend/pebble) share: listing records a chunk at a time, sweeping
// expired records a chunk at a time (Sweeper), and running a background
// task on a ticker until the store closes.
package walk

import (
	"time"

	"github.com/sluice-go/sluice/backend"
)

// Range calls fn for the records chunk copies out, from the store key from
// on, until fn returns false or chunk reports no next key. chunk returns up
// to a chunk of records starting at its argument and the store key the next
// chunk starts at, nil at the end. No lock or iterator is held while fn
// runs, as long as chunk releases its own before it returns.
func Range(from []byte, chunk func(from []byte) (recs []backend.Record, next []byte, err error), fn func(r backend.Record) bool) error {
	for {
		recs, next, err := chunk(from)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if !fn(r) {
				return nil
			}
		}
		if next == nil {
			return nil
		}
		from = next
	}
}

// Every calls fn once every interval until stop is closed.
func Every(stop <-chan struct{}, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		fn()
	}
}

// Sweep calls chunk until it fails, reports that it reached the last
// record, or stop is closed: one walk of the store by a background sweeper.
func Sweep(stop <-chan struct{}, chunk func() (wrapped bool, err error)) {
	for {
		wrapped, err := chunk()
		if err != nil || wrapped {
			return
		}
		select {
		case <-stop:
			return
		default:
		}
	}
}
