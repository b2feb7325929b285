package bolt

import (
	"errors"

	"go.etcd.io/bbolt"

	"github.com/sluice-go/sluice/backend/internal/frame"
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
	return s.sweeper.Sweep(now, budget)
}

// sweepRead chooses a sweep chunk's candidates in a read-only transaction,
// which blocks no one: at most budget records from key from on (nil: the
// first).
func (s *Store) sweepRead(from []byte, budget int, now int64) (candidates [][]byte, next []byte, err error) {
	if err := s.gate.Enter(); err != nil {
		return nil, nil, err
	}
	defer s.gate.Leave()
	err = s.view("sweep", func(tx *bbolt.Tx) error {
		b, err := records(tx)
		if err != nil {
			return err
		}
		c := orderedCursor{c: b.Cursor(), size: tx.Size()}
		k, v, err := c.seek(from)
		for examined := 0; err == nil && k != nil && examined < budget; k, v, err = c.next() {
			examined++
			if v == nil {
				continue // a nested bucket: not a record
			}
			if frame.Dead(v, now) {
				candidates = append(candidates, append([]byte(nil), k...))
			}
		}
		if k != nil {
			next = append([]byte(nil), k...)
		}
		return err
	})
	if err != nil {
		return nil, nil, s.wrap("sweep", err)
	}
	return candidates, next, nil
}

// sweepDelete deletes the candidates still corrupt or expired at now in one
// write transaction (bbolt's single writer means nothing changes between
// the check and the delete). A transaction that finds nothing to delete is
// rolled back, and costs no commit.
func (s *Store) sweepDelete(candidates [][]byte, now int64) (removed int, err error) {
	if err := s.gate.Enter(); err != nil {
		return 0, err
	}
	defer s.gate.Leave()
	err = s.updateTx("sweep", func(tx *bbolt.Tx) error {
		b, err := records(tx)
		if err != nil {
			return err
		}
		for _, k := range candidates {
			v := b.Get(k)
			if v == nil || !frame.Dead(v, now) {
				continue // deleted or rewritten since
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
		return 0, s.wrap("sweep", err)
	}
	return removed, nil
}
