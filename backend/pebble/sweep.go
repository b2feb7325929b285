package pebble

import (
	"bytes"
	"fmt"
	"runtime/debug"

	pebbledb "github.com/cockroachdb/pebble/v2"

	"github.com/sluice-go/sluice/backend/internal/frame"
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
	return s.sweeper.Sweep(now, budget)
}

// sweepRead chooses a sweep chunk's candidates (prefixed keys) without
// blocking anyone: at most budget records from the prefixed key from on
// (nil: the first).
func (s *Store) sweepRead(from []byte, budget int, now int64) (candidates [][]byte, next []byte, err error) {
	defer s.catch("sweep", &err, debug.SetPanicOnFault(true))
	if err := s.poisoned("sweep"); err != nil {
		return nil, nil, err
	}
	if err := s.enter("sweep"); err != nil {
		return nil, nil, err
	}
	defer s.gate.Leave()
	lower := from
	if lower == nil {
		lower = []byte{recordPrefix}
	}
	it, err := s.db.NewIter(&pebbledb.IterOptions{LowerBound: lower, UpperBound: []byte{recordEnd}})
	if err != nil {
		return nil, nil, fmt.Errorf("sluice/backend/pebble: sweep: %w", err)
	}
	examined := 0
	valid := it.First()
	for ; valid && examined < budget; valid = it.Next() {
		examined++
		v, verr := it.ValueAndErr()
		if verr != nil {
			break // the iterator keeps the error for Close
		}
		if frame.Dead(v, now) {
			candidates = append(candidates, append([]byte(nil), it.Key()...))
		}
	}
	if valid {
		next = append([]byte(nil), it.Key()...)
	}
	if err := it.Close(); err != nil {
		return nil, nil, fmt.Errorf("sluice/backend/pebble: sweep: %w", err)
	}
	return candidates, next, nil
}

// sweepDelete deletes, with writes held off, the candidates still corrupt or
// expired at now, in one unsynced batch. The candidates are in key order, so
// one iterator seeks through them.
func (s *Store) sweepDelete(candidates [][]byte, now int64) (removed int, err error) {
	defer s.catch("sweep", &err, debug.SetPanicOnFault(true))
	if err := s.poisoned("sweep"); err != nil {
		return 0, err
	}
	if err := s.unstick("sweep"); err != nil {
		return 0, err
	}
	if err := s.enter("sweep"); err != nil {
		return 0, err
	}
	defer s.gate.Leave()
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	last := candidates[len(candidates)-1]
	it, err := s.db.NewIter(&pebbledb.IterOptions{LowerBound: candidates[0], UpperBound: append(last[:len(last):len(last)], 0)})
	if err != nil {
		return 0, fmt.Errorf("sluice/backend/pebble: sweep: %w", err)
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
		if frame.Dead(v, now) {
			deleteRecord(b, k[1:])
			removed++
		}
	}
	if err := it.Close(); err != nil {
		return 0, fmt.Errorf("sluice/backend/pebble: sweep: %w", err)
	}
	if removed > 0 {
		if err := s.db.Apply(b, pebbledb.NoSync); err != nil {
			return 0, fmt.Errorf("sluice/backend/pebble: sweep: %w", err)
		}
	}
	return removed, nil
}
