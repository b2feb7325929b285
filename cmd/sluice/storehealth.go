package main

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/engine"
)

// healthz answers an admin listener's /healthz: "ok", or, while the
// engine's durable store fails to write (a full disk, say), 503 and the
// store's error, which names the path and what failed, so that a readiness
// probe takes the process out of rotation until the store writes again.
func healthz(eng *engine.Engine) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if eng != nil {
			if err := eng.StoreHealth(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, "not ready: "+err.Error()+"\n")
				return
			}
		}
		io.WriteString(w, "ok")
	}
}

// storeHealthEvery is how often the gRPC health service looks at the
// store's health.
const storeHealthEvery = time.Second

// grpcHealth keeps a gRPC health service's statuses: serving once ready has
// been called, but not while the engine's durable store fails to write.
type grpcHealth struct {
	set   func(serving bool)
	eng   *engine.Engine
	ready atomic.Bool
	last  atomic.Int32 // 0 unset, 1 serving, 2 not serving
}

// update sets the statuses to what they should be now, when they changed.
func (g *grpcHealth) update() {
	serving := g.ready.Load() && (g.eng == nil || g.eng.StoreHealth() == nil)
	v := int32(2)
	if serving {
		v = 1
	}
	if g.last.Swap(v) != v {
		g.set(serving)
	}
}

// markReady records that the configuration is in force.
func (g *grpcHealth) markReady() { g.ready.Store(true); g.update() }

// watch updates the statuses every storeHealthEvery until ctx ends.
func (g *grpcHealth) watch(ctx context.Context) {
	t := time.NewTicker(storeHealthEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.update()
		}
	}
}
