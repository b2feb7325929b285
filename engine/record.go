package engine

import (
	"context"

	"github.com/sluice-go/sluice/backend"
)

// Record returns a copy of key's record under l as the engine would step it
// now: from the in-memory tier over a durable store (so a spending not yet
// flushed is seen), from the store otherwise; nil for a key never seen or
// expired. It spends nothing and is meant for showing a caller's state
// (an admin endpoint, say), not for deciding: use Peek for what the caller
// may spend. Over a compare-and-swap store (Redis) it is the store's record.
// ctx is read as Peek reads it (see the package doc's Context).
func (e *Engine) Record(ctx context.Context, l Limit, key string) ([]byte, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	k := AppendKey(nil, l.Namespace, key)
	now := e.now()
	if e.store.swap != nil {
		if err := ctx.Err(); err != nil {
			return nil, errorf("%w", err)
		}
		rec, err := e.b.Get(k, now)
		if err != nil {
			return nil, e.storeError("read", err)
		}
		return append([]byte(nil), rec...), nil
	}
	if err := e.done(ctx); err != nil {
		return nil, err
	}
	h := backend.Hash(k)
	i := int(h & e.mask)
	e.lock(i)
	rec, err := e.get(&e.stripes[i], h, k, now)
	out := append([]byte(nil), rec...)
	e.unlock(i)
	if err != nil {
		return nil, e.storeError("read", err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}
