package redis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// casEachSource is the compare-and-swap of several keys, each on its own:
// every key is compared and, when it holds what its swap expects, written,
// whatever the others hold. For key i, ARGV[4i-3..4i] are casOneSource's
// ARGV[1..4] for it. The reply is the server's TIME in microseconds, then
// per key 1 when it was written, else what it holds (false for nothing).
const casEachSource = `
local t = redis.call('TIME')
local out = {t[1] * 1000000 + t[2]}
for i = 1, #KEYS do
  local key, a = KEYS[i], 4 * i
  local v = redis.call('GET', key)
  local k, ok = ARGV[a-3], false
  if k == '' then
    ok = not v
  elseif v then
    if k == '=' then ok = v == ARGV[a-2] else ok = redis.sha1hex(v) == ARGV[a-2] end
  end
  if ok then
    local ttl = ARGV[a-1]
    if ttl == '-1' then
      redis.call('DEL', key)
    elseif string.byte(ttl) == 43 then
      local want = tonumber(string.sub(ttl, 2))
      local left = redis.call('PTTL', key)
      if left > 0 and left < want then
        redis.call('PEXPIRE', key, want)
      end
    elseif ttl ~= '0' then
      redis.call('SET', key, ARGV[a], 'PX', ttl)
    end
    out[i + 1] = 1
  else
    out[i + 1] = v
  end
end
return out
`

var casEachScript = goredis.NewScript(casEachSource)

// Batches of single-key compare-and-swaps: at most maxBatch swaps in one
// script call, at most maxFlying calls in flight.
const (
	maxBatch  = 64
	maxFlying = 4
)

// batcher gathers the single-key compare-and-swaps made while more than
// ClientOptions.PipelineAbove are in flight (many callers over many keys)
// into script calls of up to maxBatch keys, each key swapped on its own.
// Redis then runs one script, not one per decision, and the client one
// command: for the keys' GETs and SETs, most of what a decision costs
// either side is the call around them.
//
// A caller arriving while fewer than maxFlying calls are out sends one at
// once, with itself and the callers queued before it; otherwise it
// queues. A caller whose call is answered passes the lead to the first
// caller queued, if any, which sends the next call. The engine has at most
// one swap in flight per key, so a batch never holds a key twice.
//
// The deadline of a call starts when it is sent: a swap that waited for a
// call to come back is not refused for the wait while Redis answers each
// call within the deadline. When a call fails (its deadline, a lost
// connection, the breaker), the swaps that queued before it was sent,
// having waited all of it, fail with it instead of waiting out a call of
// their own; those that queued later go in the next call but keep the
// deadline they would have had from the moment they queued. So none waits
// much longer than one deadline while Redis does not answer, and those
// that arrive as it comes back are not failed for the calls before them.
type batcher struct {
	mu     sync.Mutex
	queue  []*batchCall
	flying int
}

// batchCall is one single-key swap waiting in, or answered by, a batch.
type batchCall struct {
	c      *oneCall
	queued time.Time // when it queued; zero if sent at once
	// due, when not zero, is the latest the swap may be answered: set
	// when a call failed while it queued.
	due  time.Time
	lead bool          // woken to send the next batch, not answered
	wake chan struct{} // receives once: answered, or lead
	ok   bool
	cur  []byte
	now  int64
	err  error
}

// batched is compareAndSwapOne's swap of c sent in a batch.
func (s *Store) batched(c *oneCall) (bool, [][]byte, int64, error) {
	bc := &batchCall{c: c}
	b := &s.batch
	b.mu.Lock()
	lead := b.flying < maxFlying
	if lead {
		b.flying++
	} else {
		bc.wake, bc.queued = make(chan struct{}, 1), time.Now()
		b.queue = append(b.queue, bc)
	}
	b.mu.Unlock()
	if !lead {
		<-bc.wake
		lead = bc.lead
	}
	if lead {
		b.mu.Lock()
		n := min(len(b.queue), maxBatch-1)
		batch := append([]*batchCall{bc}, b.queue[:n]...)
		b.queue = b.queue[n:]
		b.mu.Unlock()

		sent := time.Now()
		failed := s.sendBatch(batch)

		var behind []*batchCall // failed with this call
		b.mu.Lock()
		var next *batchCall
		if err := failed; err != nil && isFailure(err) {
			kept := b.queue[:0]
			for _, o := range b.queue {
				switch {
				case o.queued.Before(sent):
					o.err = err
					behind = append(behind, o)
				case o.due.IsZero():
					o.due = o.queued.Add(s.timeout)
					kept = append(kept, o)
				default:
					kept = append(kept, o)
				}
			}
			clear(b.queue[len(kept):])
			b.queue = kept
		}
		if len(b.queue) > 0 {
			next, b.queue = b.queue[0], b.queue[1:]
			next.lead = true
		} else {
			b.flying--
		}
		b.mu.Unlock()
		for _, o := range batch[1:] {
			o.wake <- struct{}{}
		}
		for _, o := range behind {
			o.wake <- struct{}{}
		}
		if next != nil {
			next.wake <- struct{}{}
		}
	}
	if bc.err != nil {
		return false, nil, 0, bc.err
	}
	var cur [][]byte
	if !bc.ok {
		cur = [][]byte{bc.cur}
	}
	return bc.ok, cur, bc.now, nil
}

// sendBatch sends batch's swaps in one script call, under a deadline
// from now (or the earliest due, if sooner), and sets each one's outcome;
// it returns the call's error. A swap already past its due fails without
// being sent.
func (s *Store) sendBatch(batch []*batchCall) error {
	now := time.Now()
	deadline := now.Add(s.timeout)
	live := batch[:0:0]
	for _, bc := range batch {
		switch {
		case bc.due.IsZero():
		case !now.Before(bc.due):
			bc.err = fmt.Errorf("sluice/backend/redis: %w after %v queued behind failed calls", context.DeadlineExceeded, s.timeout)
			continue
		case bc.due.Before(deadline):
			deadline = bc.due
		}
		live = append(live, bc)
	}
	if len(live) == 0 {
		return nil
	}
	batch = live
	args := make([]any, 3, 3+5*len(batch))
	args[0], args[1], args[2] = "evalsha", casEachScript.Hash(), len(batch)
	for _, bc := range batch {
		args = append(args, bc.c.args[3])
	}
	for _, bc := range batch {
		c := bc.c
		args = append(args, &c.kind, &c.exp, &c.px, &c.val)
	}
	var reply []any
	err := s.callBy(deadline, int64(len(batch)), func(ctx context.Context) error {
		cmd := goredis.NewSliceCmd(ctx, args...)
		err := s.c.Process(ctx, cmd)
		if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			args[0], args[1] = "eval", casEachSource
			cmd = goredis.NewSliceCmd(ctx, args...)
			err = s.c.Process(ctx, cmd)
		}
		if err == nil {
			reply = cmd.Val()
		}
		return err
	})
	if err == nil {
		err = s.parseEach(reply, batch)
	}
	if err != nil {
		for _, bc := range batch {
			bc.err = err
		}
		return err
	}
	s.timed.Store(time.Now().UnixNano())
	return nil
}

// parseEach reads casEachSource's reply into the batch's outcomes.
func (s *Store) parseEach(reply []any, live []*batchCall) error {
	if len(reply) != 1+len(live) {
		return fmt.Errorf("sluice/backend/redis: script replied %d values for %d keys", len(reply), len(live))
	}
	usec, isInt := reply[0].(int64)
	if !isInt || usec <= 0 || usec > (1<<63-1)/int64(time.Microsecond) {
		return fmt.Errorf("sluice/backend/redis: script replied a time of %v", reply[0])
	}
	now := usec * int64(time.Microsecond)
	if s.noClock {
		now = 0
	}
	for i, bc := range live {
		bc.now = now
		switch v := reply[1+i].(type) {
		case int64:
			bc.ok = v == 1
		case string:
			bc.cur = []byte(v)
		case nil:
		default:
			return fmt.Errorf("sluice/backend/redis: script replied %T for a key", v)
		}
	}
	return nil
}

// callBy is call with the deadline given, for a call carrying n
// decisions (which the breaker weighs as n calls).
func (s *Store) callBy(deadline time.Time, n int64, fn func(ctx context.Context) error) error {
	probe, ok := s.brk.allow()
	if !ok {
		return ErrUnavailable
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	err := fn(ctx)
	late := ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded)
	cancel()
	s.brk.doneN(probe, err, n)
	if err != nil && s.stale != nil && isFailure(err) && !isReply(err) {
		s.stale.Store(time.Now().UnixNano())
	}
	switch {
	case err == nil:
		return nil
	case late && !errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("sluice/backend/redis: %w after %v: %w", context.DeadlineExceeded, s.timeout, err)
	default:
		return fmt.Errorf("sluice/backend/redis: %w", err)
	}
}
