package bench

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/go-chi/httprate"
	"github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	sluicehttp "github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/identity"
)

// Middleware implementations BenchmarkMiddleware compares.
const (
	MiddlewareFloor     = "floor"     // the bare handler, no middleware
	MiddlewareSluice    = "sluice"    // sluice/httplimit over the memory backend
	MiddlewareHTTPRate  = "httprate"  // github.com/go-chi/httprate
	MiddlewareGoLimiter = "golimiter" // github.com/sethvargo/go-limiter/httplimit over memorystore
)

// Middlewares lists the implementations, floor first.
var Middlewares = []string{MiddlewareFloor, MiddlewareSluice, MiddlewareHTTPRate, MiddlewareGoLimiter}

// OKHandler is the trivial handler every middleware wraps.
var OKHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusOK)
})

// NewMiddleware returns next wrapped in the named middleware (see
// Middlewares), limiting per client IP at r, and a function that releases
// it. For MiddlewareFloor it returns next itself.
func NewMiddleware(name string, r Rate, next http.Handler) (http.Handler, func(), error) {
	switch name {
	case MiddlewareFloor:
		return next, func() {}, nil
	case MiddlewareSluice:
		return newSluiceMiddleware(r, next)
	case MiddlewareHTTPRate:
		// httprate counts in an int; its sweeper cannot be stopped.
		limit := r.Limit
		if limit > 1<<30 {
			limit = 1 << 30
		}
		mw := httprate.LimitBy(int(limit), r.Window, peerIP)
		return mw(next), func() {}, nil
	case MiddlewareGoLimiter:
		s, err := memorystore.New(&memorystore.Config{
			Tokens:        uint64(r.Limit),
			Interval:      r.Window,
			SweepInterval: 24 * time.Hour,
		})
		if err != nil {
			return nil, nil, err
		}
		m, err := httplimit.NewMiddleware(s, httplimit.IPKeyFunc())
		if err != nil {
			return nil, nil, err
		}
		return m.Handle(next), func() { _ = s.Close(context.Background()) }, nil
	}
	return nil, nil, &unknownMiddlewareError{name}
}

type unknownMiddlewareError struct{ name string }

func (e *unknownMiddlewareError) Error() string { return "bench: unknown middleware " + e.name }

// newSluiceMiddleware is sluice/httplimit with one token-bucket rule of
// scope ip covering every path, an Identifier with its defaults, and an
// engine over the memory backend with its defaults.
func newSluiceMiddleware(r Rate, next http.Handler) (http.Handler, func(), error) {
	e, err := engine.New(memory.New(nil), nil)
	if err != nil {
		return nil, nil, err
	}
	rs, err := sluice.NewRuleset([]sluice.Rule{{
		Name:       "bench",
		PathPrefix: "/",
		Scope:      sluice.ScopeIP,
		Algorithm:  algo.TokenBucketName,
		Limit:      r.Limit,
		Window:     r.Window,
	}}, nil, sluice.MatchMostSpecific)
	if err != nil {
		_ = e.Close()
		return nil, nil, err
	}
	id, err := identity.New(identity.Config{})
	if err != nil {
		_ = e.Close()
		return nil, nil, err
	}
	mw, err := sluicehttp.New(sluicehttp.Config{
		Engine:     e,
		Registry:   sluice.NewRegistry(rs),
		Identifier: id,
	})
	if err != nil {
		_ = e.Close()
		return nil, nil, err
	}
	return mw(next), func() { _ = e.Close() }, nil
}

// DiscardWriter is a minimal http.ResponseWriter that keeps the status and
// the header map and discards the body. Reset empties the header map,
// keeping its storage, so reusing one writer measures the middleware and
// not the writer.
type DiscardWriter struct {
	h      http.Header
	Status int
}

// NewDiscardWriter returns an empty DiscardWriter.
func NewDiscardWriter() *DiscardWriter { return &DiscardWriter{h: make(http.Header)} }

// Header returns the header map.
func (w *DiscardWriter) Header() http.Header { return w.h }

// Write discards p.
func (w *DiscardWriter) Write(p []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	return len(p), nil
}

// WriteHeader records the first status written.
func (w *DiscardWriter) WriteHeader(code int) {
	if w.Status == 0 {
		w.Status = code
	}
}

// Reset forgets the status and headers.
func (w *DiscardWriter) Reset() {
	w.Status = 0
	clear(w.h)
}

// peerIP keys a request by its connection's peer address, as the other
// middlewares here do.
func peerIP(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr, nil
	}
	return host, nil
}
