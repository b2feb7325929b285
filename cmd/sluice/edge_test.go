package main

import (
	"testing"
	"time"
)

// The deadline of a body's next read: the inactivity timeout from now, or
// sooner, the instant the bytes read so far fall below the minimum rate
// counted from the end of the grace; with no minimum, the timeout alone.
func TestTimedBodyDeadline(t *testing.T) {
	now := time.Unix(1000, 0)
	grace := now.Add(5 * time.Second)
	for _, c := range []struct {
		name    string
		minRate int64
		read    int64
		at      time.Time
		want    time.Time
	}{
		{"no minimum", 0, 0, now.Add(time.Hour), now.Add(time.Hour + 60*time.Second)},
		{"nothing read yet: the grace's end", 240, 0, now, grace},
		{"240 bytes at 240/s: a second past the grace", 240, 240, now, grace.Add(time.Second)},
		{"well ahead of the rate: the timeout", 240, 1 << 30, now, now.Add(60 * time.Second)},
		{"behind the rate: a deadline already past", 1000, 100, now.Add(10 * time.Second), grace.Add(100 * time.Millisecond)},
		{"a huge count does not overflow", 1, 1 << 62, now, now.Add(60 * time.Second)},
	} {
		b := &timedBody{timeout: 60 * time.Second, minRate: c.minRate, read: c.read}
		if c.minRate > 0 {
			b.rateFrom = grace
		}
		if got := b.deadline(c.at); !got.Equal(c.want) {
			t.Errorf("%s: deadline %v, want %v", c.name, got.Sub(now), c.want.Sub(now))
		}
	}
}
