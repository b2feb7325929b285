package bolt

import (
	"errors"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/internal/walk"
)

// errNothingSwept rolls back a sweep transaction that found nothing left to
// delete, so that it costs no commit.
var errNothingSwept = errors.New("nothing swept")

// Sweep runs one bounded chunk of expiry sweeping at now: it examines at
// most budget records (Options.SweepBatch when budget is zero or less),
// starting at the key where the previous chunk stopped, and deletes those
// expired at now or corrupt, in one write transaction. After the last
// record it starts over from the first. It returns the number of records
// removed.
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

	// Read: choose the candidates in a read-only transaction, which
	// blocks no one.
	var candidates [][]byte
	var next []byte
	err = s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(recordsBucket).Cursor()
		k, v := c.First()
		if s.cursor != nil {
			k, v = c.Seek(s.cursor)
		}
		for examined := 0; k != nil && examined < budget; k, v = c.Next() {
			examined++
			if v == nil {
				continue // a nested bucket: not a record
			}
			if exp, _, ok := decode(v); !ok || expired(exp, now) {
				candidates = append(candidates, append([]byte(nil), k...))
			}
		}
		if k != nil {
			next = append([]byte(nil), k...)
		}
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("sluice/backend/bolt: sweep: %w", err)
	}
	s.cursor = next
	if len(candidates) == 0 {
		return 0, next == nil, nil
	}
	if s.beforeDelete != nil {
		s.beforeDelete()
	}

	// Delete: in one write transaction, keep only the candidates still
	// expired (bbolt's single writer means nothing changes meanwhile).
	err = s.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(recordsBucket)
		for _, k := range candidates {
			v := b.Get(k)
			if v == nil {
				continue // deleted since
			}
			if exp, _, ok := decode(v); ok && !expired(exp, now) {
				continue // rewritten since
			}
			if err := b.Delete(k); err != nil {
				return err
			}
			removed++
		}
		if removed == 0 {
			return errNothingSwept
		}
		return nil
	})
	if errors.Is(err, errNothingSwept) {
		err = nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("sluice/backend/bolt: sweep: %w", err)
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
