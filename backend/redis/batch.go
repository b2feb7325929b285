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
type batcher struct {
	mu     sync.Mutex
	queue  []*batchCall
	flying int
}

// batchCall is one single-key swap waiting in, or answered by, a batch.
type batchCall struct {
	c        *oneCall
	deadline time.Time
	lead     bool          // woken to send the next batch, not answered
	wake     chan struct{} // receives once: answered, or lead
	ok       bool
	cur      []byte
	now      int64
	err      error
}

// batched is compareAndSwapOne's swap of c sent in a batch.
func (s *Store) batched(c *oneCall) (bool, [][]byte, int64, error) {
	bc := &batchCall{c: c, deadline: time.Now().Add(s.timeout)}
	b := &s.batch
	b.mu.Lock()
	lead := b.flying < maxFlying
	if lead {
		b.flying++
	} else {
		bc.wake = make(chan struct{}, 1)
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

		s.sendBatch(batch)

		b.mu.Lock()
		var next *batchCall
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

// sendBatch sends batch's swaps in one script call and sets each one's
// outcome. A swap whose deadline has passed while it queued fails without
// being sent; the call's deadline is the earliest of the rest.
func (s *Store) sendBatch(batch []*batchCall) {
	now := time.Now()
	live := batch[:0:0]
	for _, bc := range batch {
		if now.Before(bc.deadline) {
			live = append(live, bc)
			continue
		}
		bc.err = fmt.Errorf("sluice/backend/redis: %w after %v queued for a batch", context.DeadlineExceeded, s.timeout)
	}
	if len(live) == 0 {
		return
	}
	deadline := live[0].deadline
	args := make([]any, 3, 3+5*len(live))
	args[0], args[1], args[2] = "evalsha", casEachScript.Hash(), len(live)
	for _, bc := range live {
		if bc.deadline.Before(deadline) {
			deadline = bc.deadline
		}
		args = append(args, bc.c.args[3])
	}
	for _, bc := range live {
		c := bc.c
		args = append(args, &c.kind, &c.exp, &c.px, &c.val)
	}
	var reply []any
	err := s.callBy(deadline, int64(len(live)), func(ctx context.Context) error {
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
		err = s.parseEach(reply, live)
	}
	if err != nil {
		for _, bc := range live {
			bc.err = err
		}
		return
	}
	s.timed.Store(time.Now().UnixNano())
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
	switch {
	case err == nil:
		return nil
	case late && !errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("sluice/backend/redis: %w after %v: %w", context.DeadlineExceeded, s.timeout, err)
	default:
		return fmt.Errorf("sluice/backend/redis: %w", err)
	}
}
