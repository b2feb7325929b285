package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/sluice-go/sluice/backend"
)

// resetChannel is the Pub/Sub channel, under the store's prefix, on which
// Delete announces the key it deleted.
func (s *Store) resetChannel() string { return s.prefix + "deleted" }

// changeChannel is the Pub/Sub channel, under the store's prefix, on which
// a swap with backend.Swap.Announce announces the key it wrote, after the
// announcing store's origin.
func (s *Store) changeChannel() string { return s.prefix + "changed" }

// originLen is the length of a store's origin.
const originLen = 16

// newOrigin returns a random origin for a store's announcements.
func newOrigin() string {
	var b [originLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// announce publishes a deleted key to every store watching. A failure is
// not the Delete's: the record is gone, and a watcher that misses the
// message forgets the key when its own records say so.
func (s *Store) announce(key []byte) {
	_ = s.call(func(ctx context.Context) error { return s.c.Publish(ctx, s.resetChannel(), key).Err() })
}

// WatchDeletes implements backend.Swapper with Redis Pub/Sub: Delete
// publishes the key on "<prefix>deleted" (on a Cluster, Pub/Sub reaches
// every node), a swap with backend.Swap.Announce publishes the store's
// origin and the key on "<prefix>changed" from its compare-and-swap script,
// in the same atomic step as its write, and the watch subscribes to both
// on a connection of its own, which go-redis re-establishes after a
// failure, skipping the store's own announcements. A message published
// while a watcher's connection was down is missed by that watcher.
func (s *Store) WatchDeletes(fn func(key []byte)) (func(), error) {
	if s.closed.Load() {
		return nil, backend.ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultConnectTimeout)
	defer cancel()
	ps := s.base.Subscribe(ctx, s.resetChannel(), s.changeChannel())
	// The subscription's confirmation. Its connection is set up under the
	// client's read timeout (50 ms by default), which a loaded host can
	// miss; go-redis subscribes again on the next Receive, so a failure is
	// retried until DefaultConnectTimeout has passed.
	for {
		_, err := ps.Receive(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil || s.closed.Load() {
			ps.Close()
			return nil, fmt.Errorf("sluice/backend/redis: subscribing to %s: %w", s.resetChannel(), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		changed := s.changeChannel()
		for msg := range ps.Channel() {
			key := msg.Payload
			if msg.Channel == changed {
				if len(key) < originLen || key[:originLen] == s.origin {
					continue // the store's own, or not an announcement
				}
				key = key[originLen:]
			}
			fn([]byte(key))
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			ps.Close() // closing a broken subscription has nothing to report
			wg.Wait()
		})
	}, nil
}
