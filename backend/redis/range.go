package redis

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/internal/braces"
)

// rangeTimeout bounds a whole Range: it is for inspection tools, not
// decisions.
const rangeTimeout = time.Minute

// Range implements backend.Swapper for inspection tools: it lists every
// record under the store's prefix (on a Cluster, on every primary) with
// SCAN, then reads each record and its expiry. The listing is not a
// snapshot: records written meanwhile may or may not appear. Keys are
// given back in the form the engine wrote them (engine.AppendKey), in
// that order.
func (s *Store) Range(start []byte, fn func(r backend.Record) bool) error {
	if s.closed.Load() {
		return backend.ErrClosed
	}
	ctx, cancel := context.WithTimeout(context.Background(), rangeTimeout)
	defer cancel()
	var (
		mu    sync.Mutex // guards names: ForEachMaster calls its function concurrently
		names []string
		err   error
	)
	scan := func(ctx context.Context, c goredis.Cmdable) error {
		var found []string
		it := c.Scan(ctx, 0, globEscape(s.prefix)+"*", 1000).Iterator()
		for it.Next(ctx) {
			found = append(found, it.Val())
		}
		mu.Lock()
		names = append(names, found...)
		mu.Unlock()
		return it.Err()
	}
	if cc, ok := s.base.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error { return scan(ctx, n) })
	} else {
		err = scan(ctx, s.c)
	}
	if err != nil {
		return fmt.Errorf("sluice/backend/redis: listing keys: %w", err)
	}
	type entry struct {
		key  []byte
		name string
	}
	entries := make([]entry, 0, len(names))
	for _, n := range names {
		if k, ok := s.engineKey(n); ok && bytes.Compare(k, start) >= 0 {
			entries = append(entries, entry{k, n})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return bytes.Compare(a.key, b.key) })
	for _, e := range entries {
		v, err := s.c.Get(ctx, e.name).Bytes()
		if errors.Is(err, goredis.Nil) {
			continue // expired since the listing
		}
		if err != nil {
			return fmt.Errorf("sluice/backend/redis: reading %s: %w", e.name, err)
		}
		ms, err := s.c.PExpireTime(ctx, e.name).Result()
		if err != nil {
			return fmt.Errorf("sluice/backend/redis: reading the expiry of %s: %w", e.name, err)
		}
		var exp int64
		if ms > 0 {
			exp = int64(ms / time.Millisecond * time.Millisecond)
		}
		if !fn(backend.Record{Key: e.key, Value: v, ExpiresAt: exp}) {
			return nil
		}
	}
	return nil
}

// engineKey turns a Redis key redisKey made back into the engine's key.
func (s *Store) engineKey(name string) ([]byte, bool) {
	rest, ok := strings.CutPrefix(name, s.prefix)
	if !ok || !strings.HasPrefix(rest, "{") {
		return nil, false
	}
	end := strings.IndexByte(rest, '}')
	if end < 0 {
		return nil, false
	}
	if strings.IndexByte(rest[1:end], '{') >= 0 {
		return nil, false // redisKey escapes braces
	}
	key, ok := braces.Unescape(rest[1:end])
	if !ok {
		return nil, false
	}
	tail := rest[end+1:]
	if tail == "" {
		// A plain key; one that reads as a namespaced key would have been
		// stored under the namespaced form.
		if n, w := binary.Uvarint([]byte(key)); w > 0 && n <= uint64(len(key)-w) {
			return nil, false
		}
		return []byte(key), true
	}
	var tenant []byte
	nested := tail[0] == '{'
	if nested {
		// A level within its tenant: the tenant's key, then the level's
		// own between braces.
		end := strings.IndexByte(tail, '}')
		if end < 0 || strings.IndexByte(tail[1:end], '{') >= 0 {
			return nil, false
		}
		own, ok := braces.Unescape(tail[1:end])
		if !ok {
			return nil, false
		}
		tenant, key, tail = []byte(key), own, tail[end+1:]
	}
	ns, ok := strings.CutPrefix(tail, ":")
	if !ok {
		return nil, false
	}
	if _, _, ok := backend.SplitNested(key); ok && !nested {
		return nil, false // stored under the nested form, not this one
	}
	k := binary.AppendUvarint(nil, uint64(len(ns)))
	k = append(k, ns...)
	if nested {
		k = append(k, 0)
		k = binary.AppendUvarint(k, uint64(len(tenant)))
		k = append(k, tenant...)
	}
	return append(k, key...), true
}

// globEscape escapes the characters SCAN's MATCH pattern gives meaning to.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if strings.IndexByte(`*?[]\`, c) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}
