package redis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
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
// queues. A flight whose call is answered sends the next call, with the
// callers queued meanwhile, from a goroutine of its own, until the queue
// is empty: a caller waits for its own answer only. The engine has at
// most one swap in flight per key, so a batch never holds a key twice.
//
// The deadline of a call starts when it is sent: a swap that waited for a
// call to come back is not refused for the wait while Redis answers each
// call within the deadline. When a call fails (its deadline, a lost
// connection, the breaker), the swaps that queued before it was sent,
// having waited all of it, fail with it instead of waiting out a call of
// their own; those that queued later are due one deadline after they
// queued: they go in the next call, but each is answered its deadline
// error at its due if that call has not answered it by then (the call
// itself may wait on for Redis, a deadline from when it was sent). So no
// swap waits longer than one deadline while Redis does not answer, and
// those that arrive as it comes back are not failed for the calls before
// them.
type batcher struct {
	mu     sync.Mutex
	queue  []*batchCall
	flying int
}

// batchCall is one single-key swap waiting in, or answered by, a batch.
type batchCall struct {
	c      *oneCall
	queued time.Time // when it queued; zero if sent at once
	// The fields below are guarded by batcher.mu.
	//
	// due, when not zero, is the latest the swap may be answered: set
	// when a call failed while it queued, with timer to answer it then.
	due      time.Time
	timer    *time.Timer
	answered bool
	out      batchResult   // the answer, read by the caller once woken
	wake     chan struct{} // receives once, answered
	// res is the outcome of the call that carried it, written by that
	// call's flight alone; answer copies it to out unless the swap was
	// answered at its due already.
	res batchResult
}

// batchResult is a batched swap's outcome.
type batchResult struct {
	ok  bool
	cur []byte
	now int64
	err error
}

// batched is compareAndSwapOne's swap of c sent in a batch. The batch's
// call is not bounded by ctx, which the other swaps in it do not share;
// a caller whose ctx ends first stops waiting for it, with an error
// wrapping ctx.Err(), and its swap, queued or sent, may still be written.
func (s *Store) batched(ctx context.Context, c *oneCall) (bool, [][]byte, int64, error) {
	bc := &batchCall{c: c, wake: make(chan struct{}, 1)}
	b := &s.batch
	b.mu.Lock()
	lead := b.flying < maxFlying
	if lead {
		b.flying++
	} else {
		bc.queued = time.Now()
		b.queue = append(b.queue, bc)
	}
	b.mu.Unlock()
	if lead {
		// The caller sends its own call, its deadline from now, and
		// hands the queue, if any, to a flight of its own.
		if s.flyOnce(bc) {
			go s.fly()
		}
	}
	select {
	case <-bc.wake:
	case <-ctx.Done():
		return false, nil, 0, fmt.Errorf("sluice/backend/redis: %w", ctx.Err())
	}
	if bc.out.err != nil {
		return false, nil, 0, bc.out.err
	}
	var cur [][]byte
	if !bc.out.ok {
		cur = [][]byte{bc.out.cur}
	}
	return bc.out.ok, cur, bc.out.now, nil
}

// fly sends calls of the queued swaps until the queue is empty.
func (s *Store) fly() {
	for s.flyOnce(nil) {
	}
}

// flyOnce sends one call: first (if not nil) and the swaps queued, up to
// maxBatch, and answers them. It reports whether swaps are queued still,
// for the flight to carry on; if not, the flight has ended.
func (s *Store) flyOnce(first *batchCall) bool {
	b := &s.batch
	now := time.Now()
	b.mu.Lock()
	var batch []*batchCall
	if first != nil {
		batch = append(batch, first)
	}
	n := min(len(b.queue), maxBatch-len(batch))
	batch = append(batch, b.queue[:n]...)
	clear(b.queue[:n])
	b.queue = b.queue[n:]
	live := batch[:0]
	for _, bc := range batch {
		if !bc.due.IsZero() && !now.Before(bc.due) {
			b.answerErr(bc, fmt.Errorf("sluice/backend/redis: %w after %v queued behind failed calls", context.DeadlineExceeded, s.timeout))
			continue
		}
		live = append(live, bc)
	}
	batch = live
	b.mu.Unlock()

	var failed error
	if len(batch) > 0 {
		failed = s.sendBatch(batch)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, bc := range batch {
		b.answer(bc, bc.res)
	}
	if failed != nil && isFailure(failed) {
		kept := b.queue[:0]
		for _, o := range b.queue {
			switch {
			case o.queued.Before(now):
				b.answerErr(o, failed)
			case o.due.IsZero():
				o.due = o.queued.Add(s.timeout)
				o.timer = time.AfterFunc(time.Until(o.due), func() { s.expire(o) })
				kept = append(kept, o)
			default:
				kept = append(kept, o)
			}
		}
		clear(b.queue[len(kept):])
		b.queue = kept
	}
	if len(b.queue) > 0 {
		return true
	}
	b.flying--
	return false
}

// expire answers bc, queued or in a call not yet answered, its deadline
// error at its due.
func (s *Store) expire(bc *batchCall) {
	b := &s.batch
	b.mu.Lock()
	defer b.mu.Unlock()
	if bc.answered {
		return
	}
	if i := slices.Index(b.queue, bc); i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
	}
	b.answerErr(bc, fmt.Errorf("sluice/backend/redis: %w after %v (queued behind failed calls, then not answered)", context.DeadlineExceeded, s.timeout))
}

// answer gives bc the outcome r and wakes its caller, unless it was
// answered already. b.mu must be held.
func (b *batcher) answer(bc *batchCall, r batchResult) {
	if bc.answered {
		return
	}
	bc.answered, bc.out = true, r
	if bc.timer != nil {
		bc.timer.Stop()
	}
	bc.wake <- struct{}{}
}

// answerErr answers bc the error err. b.mu must be held.
func (b *batcher) answerErr(bc *batchCall, err error) { b.answer(bc, batchResult{err: err}) }

// sendBatch sends batch's swaps in one script call, under a deadline
// from now, and sets each one's res; it returns the call's error. A swap
// due sooner is answered its deadline error at its due by its own timer
// (expire): the call is not cut short for it, so that the others in it,
// and the breaker, do not count a failure Redis did not make.
func (s *Store) sendBatch(batch []*batchCall) error {
	deadline := time.Now().Add(s.timeout)
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
	err := s.callBy(context.Background(), deadline, int64(len(batch)), func(ctx context.Context) error {
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
			bc.res = batchResult{err: err}
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
		bc.res = batchResult{now: now}
		switch v := reply[1+i].(type) {
		case int64:
			bc.res.ok = v == 1
		case string:
			bc.res.cur = []byte(v)
		case nil:
		default:
			return fmt.Errorf("sluice/backend/redis: script replied %T for a key", v)
		}
	}
	return nil
}

// callBy is call with the deadline given, or parent's when that is
// earlier, for a call carrying n decisions (which the breaker weighs as n
// calls). When parent ends first the caller stops waiting at once, with an
// error wrapping parent's, and the breaker counts nothing: the caller gave
// up, whatever Redis was doing. A call that had not yet taken a
// connection sends nothing; one already sent runs on, from a goroutine of
// its own, until Redis answers or the store's deadline passes (the
// connection's reads wait for Redis until then, see lateConn), and may be
// written.
func (s *Store) callBy(parent context.Context, deadline time.Time, n int64, fn func(ctx context.Context) error) error {
	probe, ok := s.brk.allow()
	if !ok {
		return ErrUnavailable
	}
	ctx, cancel := context.WithDeadline(parent, deadline)
	defer cancel()
	if parent.Done() == nil {
		return s.called(parent, ctx, probe, n, fn(ctx))
	}
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		return s.called(parent, ctx, probe, n, err)
	case <-parent.Done():
		s.brk.abandon(probe)
		return fmt.Errorf("sluice/backend/redis: %w", parent.Err())
	}
}

// called counts the outcome err of a call made under ctx, derived from
// parent and not yet cancelled, and returns the call's error.
func (s *Store) called(parent, ctx context.Context, probe bool, n int64, err error) error {
	late := ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded)
	if perr := parent.Err(); err != nil && perr != nil {
		s.brk.abandon(probe)
		return fmt.Errorf("sluice/backend/redis: %w: %w", perr, err)
	}
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
