package walk

import (
	"sync"
	"time"

	"github.com/sluice-go/sluice/backend/internal/gate"
)

// Defaults of a Sweeper, and of the stores' options that configure one.
const (
	DefaultInterval = 10 * time.Second // between two walks of the background sweeper
	DefaultBatch    = 1000             // records one chunk examines
)

// Sweeper is the part of expiry sweeping the durable stores share: the key
// the next chunk starts at, the lock that serialises chunks, the default
// budget and the background loop. The store supplies how a chunk reads its
// candidates and how it deletes those still dead. Create it with
// NewSweeper.
//
// A chunk reads first, blocking no writer, and then deletes only the
// candidates still dead at now, so a record rewritten in between is kept.
// After the last record the next chunk starts over from the first.
type Sweeper struct {
	batch  int
	now    func() int64
	read   ReadFunc
	delete DeleteFunc

	// BeforeDelete, when set (by tests), runs after a chunk has read its
	// candidates and before it deletes them.
	BeforeDelete func()

	mu     sync.Mutex // serialises chunks; guards cursor
	cursor []byte     // the store key the next chunk starts at; nil = first
}

// ReadFunc chooses a chunk's candidates: from the store key from on (nil
// means the first), it examines at most budget records and returns the keys
// of those corrupt or expired at now, in key order, and the store key the
// next chunk starts at (nil after the last record). It must block no
// writer, and return backend.ErrClosed once the store is closed.
type ReadFunc func(from []byte, budget int, now int64) (candidates [][]byte, next []byte, err error)

// DeleteFunc deletes the candidates a ReadFunc chose that are still corrupt
// or expired at now, holding writes off between its check and its delete,
// and returns how many it removed.
type DeleteFunc func(candidates [][]byte, now int64) (removed int, err error)

// NewSweeper returns a Sweeper whose chunks examine batch records when no
// budget is given (DefaultBatch when batch is zero or less) and whose
// background walks read the clock now (the wall clock when nil).
func NewSweeper(batch int, now func() int64, read ReadFunc, del DeleteFunc) *Sweeper {
	if batch <= 0 {
		batch = DefaultBatch
	}
	if now == nil {
		now = func() int64 { return time.Now().UnixNano() }
	}
	return &Sweeper{batch: batch, now: now, read: read, delete: del}
}

// Sweep runs one chunk at now, examining at most budget records (the batch
// when budget is zero or less), and returns the number removed: the
// backend.Sweeper method of the stores.
func (s *Sweeper) Sweep(now int64, budget int) (removed int, err error) {
	removed, _, err = s.chunk(now, budget)
	return removed, err
}

// chunk is Sweep; wrapped reports that the chunk reached the last record.
func (s *Sweeper) chunk(now int64, budget int) (removed int, wrapped bool, err error) {
	if budget <= 0 {
		budget = s.batch
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	candidates, next, err := s.read(s.cursor, budget, now)
	if err != nil {
		return 0, false, err
	}
	s.cursor = next
	if len(candidates) > 0 {
		if s.BeforeDelete != nil {
			s.BeforeDelete()
		}
		if removed, err = s.delete(candidates, now); err != nil {
			return 0, false, err
		}
	}
	return removed, next == nil, nil
}

// Start runs the background sweeper in a goroutine of g until g closes:
// every interval (DefaultInterval when zero; never when negative) it walks
// the whole store, a chunk at a time. A chunk that fails ends that walk;
// the next tick tries again.
func (s *Sweeper) Start(g *gate.Gate, interval time.Duration) {
	if interval == 0 {
		interval = DefaultInterval
	}
	if interval < 0 {
		return
	}
	stop := g.Stop()
	g.Go(func() {
		Every(stop, interval, func() {
			Sweep(stop, func() (bool, error) {
				_, wrapped, err := s.chunk(s.now(), s.batch)
				return wrapped, err
			})
		})
	})
}
