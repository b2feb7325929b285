package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// normalCaller makes one ordinary request every interval, each on its own
// goroutine (open loop: a slow answer does not delay the next request, so
// a stalled server shows in the latencies instead of hiding between them),
// with at most maxInFlight outstanding, until stopped.
type normalCaller struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex // guards the fields below
	lat      []time.Duration
	errs     int
	skipped  int // ticks when maxInFlight requests were outstanding
	firstErr error
}

const maxInFlight = 256

func startCaller(interval, timeout time.Duration, do func(ctx context.Context, seq int) error) *normalCaller {
	ctx, cancel := context.WithCancel(context.Background())
	c := &normalCaller{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		var wg sync.WaitGroup
		sem := make(chan struct{}, maxInFlight)
		t := time.NewTicker(interval)
		defer t.Stop()
		for seq := 0; ; seq++ {
			select {
			case <-ctx.Done():
				wg.Wait()
				return
			case <-t.C:
			}
			select {
			case sem <- struct{}{}:
			default:
				c.mu.Lock()
				c.skipped++
				c.mu.Unlock()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				rctx, rcancel := context.WithTimeout(context.Background(), timeout)
				t0 := time.Now()
				err := do(rctx, seq)
				d := time.Since(t0)
				rcancel()
				c.mu.Lock()
				c.lat = append(c.lat, d)
				if err != nil {
					c.errs++
					if c.firstErr == nil {
						c.firstErr = err
					}
				}
				c.mu.Unlock()
			}()
		}
	}()
	return c
}

// callerStats summarizes a normal caller's requests.
type callerStats struct {
	n, errs, skipped int
	p50, p99, max    time.Duration
	firstErr         error
}

// finish stops the caller, waits for its outstanding requests, and
// returns their statistics (failed requests count with the time they
// took, their timeout at most).
func (c *normalCaller) finish() callerStats {
	c.cancel()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	s := callerStats{n: len(c.lat), errs: c.errs, skipped: c.skipped, firstErr: c.firstErr}
	if len(c.lat) > 0 {
		l := slices.Clone(c.lat)
		slices.Sort(l)
		s.p50, s.p99, s.max = l[(len(l)-1)*50/100], l[(len(l)-1)*99/100], l[len(l)-1]
	}
	return s
}

// pair formats p50 / p99 in ms.
func (s callerStats) pair() string {
	if s.n == 0 {
		return "no requests"
	}
	return fmt.Sprintf("%s / %s", ms(s.p50), ms(s.p99))
}

// failures says how many requests failed or were not sent, or "0".
func (s callerStats) failures() string {
	out := fmt.Sprintf("%d of %d", s.errs, s.n)
	if s.skipped > 0 {
		out += fmt.Sprintf(" (+%d not sent: %d outstanding)", s.skipped, maxInFlight)
	}
	if s.firstErr != nil {
		out += ": " + clip(s.firstErr.Error(), 80)
	}
	return out
}

func ms(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.0f s", d.Seconds())
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
}

// clip shortens s to at most n bytes, for a table cell, and escapes the
// characters a markdown table cell cannot hold.
func clip(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "…"
	}
	out := make([]rune, 0, len(s))
	for _, r := range s {
		switch r {
		case '|':
			out = append(out, '/')
		case '\n', '\r':
			out = append(out, ' ')
		default:
			out = append(out, r)
		}
	}
	return string(out)
}
