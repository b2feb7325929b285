package httplimit

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/internal/inflight"
)

// InFlightConfig configures the middleware NewInFlight returns.
type InFlightConfig struct {
	// Engine holds the slots. Required. Over Redis the limit is the
	// fleet's: every process sharing the store shares it.
	Engine *engine.Engine
	// Limit is a concurrency limit (algo.ConcurrencyName): at most its
	// Limit requests of a key in flight, each holding its slot for at
	// most its Window (the maximum hold). Required.
	Limit engine.Limit
	// Key returns the key whose slots r takes; nil means the client's IP
	// address as package identity keys it, from the connection's peer. A
	// key longer than identity.MaxKeyLen, or an error matching
	// identity.ErrBadIdentity, is answered 400.
	Key func(r *http.Request) (string, error)
	// RetryAfter is the wait a denied request is told (no exact wait
	// exists: a slot comes back when a request ends); zero means
	// sluice.DefaultRetryAfter. It is sent in whole seconds, at least 1.
	RetryAfter time.Duration
	// OnStoreError is what happens to a request when the store fails:
	// sluice.FailOpen (the default when empty) lets it through holding no
	// slot, sluice.FailClosed answers 503.
	OnStoreError sluice.StoreErrorPolicy
	// Logger receives store errors under FailOpen (at most a line a
	// second) and the errors answered 500; nil means slog.Default().
	Logger *slog.Logger
}

// InFlight is middleware holding a slot of a concurrency limit for the
// whole of each request it passes: taken before the handler runs, given
// back when the handler returns (the response has ended, or the client
// has gone away and the handler has seen its context end), so a handler
// that streams keeps its slot until its last byte. A request finding
// every slot taken is answered at once, 429 Too Many Requests with the
// configured Retry-After: nothing queues.
type InFlight struct {
	gate *inflight.Gate // takes, counts and gives back the slots
	key  func(*http.Request) (string, error)
	log  *slog.Logger
}

// NewInFlight returns the middleware. It fails when Engine is missing,
// Limit is not a concurrency limit, RetryAfter is negative or OnStoreError
// is not FailOpen or FailClosed.
func NewInFlight(cfg InFlightConfig) (*InFlight, error) {
	gate, err := inflight.New("sluice/httplimit", cfg.Engine, cfg.Limit, cfg.RetryAfter, cfg.OnStoreError, cfg.Logger)
	if err != nil {
		return nil, err
	}
	f := &InFlight{gate: gate, key: cfg.Key, log: cfg.Logger}
	if f.key == nil {
		id, err := identity.New(identity.Config{})
		if err != nil {
			return nil, err
		}
		f.key = func(r *http.Request) (string, error) { return callerKey(id, nil, r, sluice.ScopeIP) }
	}
	if f.log == nil {
		f.log = slog.Default()
	}
	return f, nil
}

// Held returns the slots this middleware holds now: the requests it has
// passed whose handlers have not returned (a gauge for metrics).
func (f *InFlight) Held() int64 { return f.gate.Held() }

// Wrap returns next behind the middleware.
func (f *InFlight) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { f.serve(w, r, next) })
}

func (f *InFlight) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	key, err := inflight.Key(f.key(r))
	if err != nil {
		if errors.Is(err, identity.ErrBadIdentity) {
			http.Error(w, "bad caller identity", http.StatusBadRequest)
			return
		}
		f.log.Error("sluice/httplimit: in-flight key", "err", err)
		http.Error(w, internalErrorBody, http.StatusInternalServerError)
		return
	}
	var ls engine.Lease
	switch f.gate.Take(r.Context(), key, &ls) {
	case sluice.Allowed:
		defer f.gate.Release(r.Context(), &ls)
		next.ServeHTTP(w, r)
	case sluice.Denied:
		w.Header().Set("Retry-After", f.gate.RetryAfter())
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, "too many requests in flight\n")
	case sluice.Passed: // FailOpen: on, holding no slot
		next.ServeHTTP(w, r)
	case sluice.Unavailable:
		if r.Context().Err() == nil { // else the client went away before a slot was taken
			unavailable(w)
		}
	default: // logged by the Decider
		http.Error(w, internalErrorBody, http.StatusInternalServerError)
	}
}
