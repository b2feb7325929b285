package pebble

import (
	"bytes"
	"fmt"
	"time"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/internal/walk"
)

// Sweep runs one bounded chunk of expiry sweeping at now: it examines at
// most budget records (Options.SweepBatch when budget is zero or less),
// starting at the key where the previous chunk stopped, and deletes those
// expired at now or corrupt, in one unsynced batch. After the last record it
// starts over from the first. It returns the number of records removed.
//
// Sweeping is invisible to readers: expired records read as absent whether
// or not they have been swept. A record rewritten between the chunk's read
// and its delete is kept. After Close, Sweep returns backend.ErrClosed.
func (s *Store) Sweep(now int64, budget int) (removed int, err error) {
	removed, _, err = s.sweep(now, budget)
	return removed, err
}

// sweep is Sweep; wrapped reports that the chunk reached the last record.
func (s *Store) sweep(now int64, budget int) (removed int, wrapped bool, err error) {
	if budget <= 0 {
		budget = s.batch
	}
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return 0, false, backend.ErrClosed
	}

	// Read: choose the candidates without blocking anyone.
	lower := append([]byte{recordPrefix}, s.cursor...)
	it, err := s.db.NewIter(&pebbledb.IterOptions{LowerBound: lower, UpperBound: []byte{recordEnd}})
	if err != nil {
		return 0, false, fmt.Errorf("sluice/backend/pebble: sweep: %w", err)
	}
	var candidates [][]byte
	examined := 0
	valid := it.First()
	for ; valid && examined < budget; valid = it.Next() {
		examined++
		v, verr := it.ValueAndErr()
		if verr != nil {
			break // the iterator keeps the error for Close
		}
		if exp, _, ok := decode(v); !ok || expired(exp, now) {
			candidates = append(candidates, append([]byte(nil), it.Key()...))
		}
	}
	var next []byte
	if valid {
		next = append([]byte(nil), it.Key()[1:]...)
	}
	if err := it.Close(); err != nil {
		return 0, false, fmt.Errorf("sluice/backend/pebble: sweep: %w", err)
	}
	s.cursor = next
	if len(candidates) == 0 {
		return 0, next == nil, nil
	}
	if s.beforeDelete != nil {
		s.beforeDelete()
	}

	// Delete: with writes held off, keep only the candidates still expired.
	// The candidates are in key order, so one iterator seeks through them.
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	last := candidates[len(candidates)-1]
	it, err = s.db.NewIter(&pebbledb.IterOptions{LowerBound: candidates[0], UpperBound: append(last[:len(last):len(last)], 0)})
	if err != nil {
		return 0, false, fmt.Errorf("sluice/backend/pebble: sweep: %w", err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	for _, k := range candidates {
		if !it.SeekGE(k) || !bytes.Equal(it.Key(), k) {
			continue // deleted since
		}
		v, verr := it.ValueAndErr()
		if verr != nil {
			break // the iterator keeps the error for Close
		}
		if exp, _, ok := decode(v); !ok || expired(exp, now) {
			deleteRecord(b, k[1:])
			removed++
		}
	}
	if err := it.Close(); err != nil {
		return 0, false, fmt.Errorf("sluice/backend/pebble: sweep: %w", err)
	}
	if removed > 0 {
		if err := s.db.Apply(b, pebbledb.NoSync); err != nil {
			return 0, false, fmt.Errorf("sluice/backend/pebble: sweep: %w", err)
		}
	}
	return removed, next == nil, nil
}

// sweeper walks the store once every interval, a chunk at a time, until
// Close. A chunk that fails ends the walk; the next tick tries again.
func (s *Store) sweeper(interval time.Duration) {
	walk.Every(s.stop, interval, func() {
		walk.Sweep(s.stop, func() (bool, error) {
			_, wrapped, err := s.sweep(s.now(), s.batch)
			return wrapped, err
		})
	})
}
