package httplimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/internal/clip"
)

// Usage reads what callers have left under the rules in force, as the
// middleware New returns for the same Config identifies and decides them
// (the Identifier, the IdentityFunc, the plan, the overrides, Exempt), and
// spends nothing: sluice.Door.Usage. Make one with NewUsage.
//
// As an http.Handler it answers a caller's question about itself: the
// caller is the request's own, found exactly as the middleware finds it,
// so a customer-facing listener can serve it (see ServeHTTP). Of answers
// for any request a program builds, such as an operator's about a named
// caller.
//
// A Usage is safe for concurrent use.
type Usage struct {
	l *limiter
}

// NewUsage returns a Usage over cfg, with New's errors. Cost, the
// response fields and DecisionInContext are not read: a usage reports
// each rule's own cost.
func NewUsage(cfg Config) (*Usage, error) {
	l, err := newLimiter(cfg)
	if err != nil {
		return nil, err
	}
	return &Usage{l: l}, nil
}

// Of returns what r's caller has left: with path, under the rules a
// request of method and path (to r's Host) would be decided under; with
// path empty, under every rule that applies to the caller whatever its
// request (sluice.Door.UsageAll). r's body is not read. The errors are
// sluice.Door.Usage's: a *sluice.KeyError when the caller cannot be
// identified, the engine's when the store cannot be read.
func (u *Usage) Of(r *http.Request, method, path string) (sluice.Usage, error) {
	r = r.Clone(r.Context())
	r.Body, r.ContentLength = http.NoBody, 0 // a Settle estimate reads none
	rs := u.l.reg.Ruleset()
	if path == "" {
		return u.l.door.UsageAll(r.Context(), rs, r)
	}
	return u.l.door.Usage(r.Context(), rs, method, path, r)
}

// callerParams are the query parameters that would name a caller: the
// caller's own usage takes none of them.
var callerParams = []string{"user", "api_key", "key", "keyhash", "ip", "plan"}

// usageParams are the query parameters ServeHTTP reads.
var usageParams = map[string]bool{"method": true, "path": true, "host": true}

// ServeHTTP answers GET (and HEAD) with what the request's own caller has
// left, as JSON (UsageBody): under every rule that applies to it, or with
// the query's path (and method, GET by default; host, the request's Host
// by default) under the rules such a request would be decided under.
//
// It never answers for another caller: a query naming one (user, api_key,
// key, keyhash, ip, plan) is refused 400, and so is any parameter it does
// not read. Who the caller is comes from the request alone, through the
// Config's Identifier and IdentityFunc: identity headers and a forwarded
// client address are believed only as the middleware believes them (from
// the trusted proxies its identity section names). Put it behind the same
// authenticating proxy as the API, so that a caller cannot claim another's
// identity header there either.
//
// A caller that cannot be identified is answered 400 (a bad identity, no
// peer address) or 500; a store that cannot be read 503. Errors are JSON
// {"error": …}.
func (u *Usage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		usageError(w, http.StatusMethodNotAllowed, "use GET")
		return
	}
	q := r.URL.Query()
	for _, p := range callerParams {
		if q.Has(p) {
			usageError(w, http.StatusBadRequest, "%s: this endpoint answers for the caller's own identity only, never for a named caller", p)
			return
		}
	}
	for p := range q {
		if !usageParams[p] {
			usageError(w, http.StatusBadRequest, "unknown parameter %s: want method, path or host", quoteClipped(p))
			return
		}
	}
	method, path, err := CheckRequest(q.Get("method"), q.Get("path"))
	if err != nil {
		usageError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if h := q.Get("host"); h != "" {
		r = r.Clone(r.Context())
		r.Host = h
	}
	got, err := u.Of(r, method, path)
	if err != nil {
		status, msg := u.errorStatus(r, err)
		usageError(w, status, "%s", msg)
		return
	}
	WriteUsage(w, got)
}

// errorStatus returns the status and message that answer err, Of's error
// for r, logging what is not the client's doing.
func (u *Usage) errorStatus(r *http.Request, err error) (int, string) {
	var ke *sluice.KeyError
	switch {
	case errors.As(err, &ke):
		if errors.Is(err, identity.ErrBadIdentity) || errors.Is(err, identity.ErrNoPeerAddr) {
			return http.StatusBadRequest, "bad caller identity: " + clip.String(err.Error(), maxLoggedError)
		}
		body, status := u.l.callerError(r, err)
		return status, body
	case errors.Is(err, engine.ErrStore) || errors.Is(err, engine.ErrClosed) || r.Context().Err() != nil:
		return http.StatusServiceUnavailable, "the store could not be read"
	}
	u.l.log.Error("sluice/httplimit: cannot read the caller's usage", "err", clip.String(err.Error(), maxLoggedError))
	return http.StatusInternalServerError, internalErrorBody
}

// MaxUsagePath is the longest path a usage query may name.
const MaxUsagePath = 4096

// CheckRequest checks the method and path a usage query names, and
// returns them as Of takes them: path, when given, starts with "/" and is
// at most MaxUsagePath bytes; method, when given, is an HTTP token of at most
// 32 bytes, and needs a path. A path without a method is GET's.
func CheckRequest(method, path string) (string, string, error) {
	switch {
	case path == "" && method != "":
		return "", "", errors.New("method needs a path")
	case path == "":
		return "", "", nil
	case path[0] != '/' || len(path) > MaxUsagePath:
		return "", "", fmt.Errorf("path %s: want an absolute path such as /v1/orders, at most %d bytes", quoteClipped(path), MaxUsagePath)
	case method == "":
		method = http.MethodGet
	case len(method) > 32 || !identity.ValidHeaderName(method):
		return "", "", fmt.Errorf("method %s: want an HTTP method such as GET", quoteClipped(method))
	}
	return method, path, nil
}

// quoteClipped quotes s, cut to 64 bytes.
func quoteClipped(s string) string { return strconv.Quote(clip.String(s, 64)) }

// usageError answers an error as JSON {"error": …}.
func usageError(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf(format, args...)})
}

// UsageBody is the JSON body of a usage answer (Usage.ServeHTTP, and
// sluice serve's GET /v1/usage).
type UsageBody struct {
	// At is when the usage was read (RFC 3339, UTC): each limit's
	// seconds count from it.
	At string `json:"at"`
	// Plan is the caller's plan, when a rule names one.
	Plan string `json:"plan,omitempty"`
	// Limits are the caller's limits, one per rule that applies: the
	// enforced rules first, most specific first, then the shadow rules.
	Limits []LimitBody `json:"limits"`
}

// LimitBody is one rule's part of a UsageBody.
type LimitBody struct {
	// Rule is the rule's name; Method, PathPrefix and Host what it
	// matches ("*" for any method); Scope whose budget it counts.
	Rule       string `json:"rule"`
	Method     string `json:"method"`
	PathPrefix string `json:"path_prefix"`
	Host       string `json:"host,omitempty"`
	Scope      string `json:"scope"`
	// Shadow reports a shadow rule: counted, never refusing a request.
	Shadow bool `json:"shadow"`
	// Key is the caller's key under the rule (an API key as keyhash:HEX).
	Key string `json:"key"`
	// Override reports that the caller has its own limit under the rule:
	// Limit and WindowSeconds are then the caller's.
	Override bool `json:"override"`
	// Exempt reports that the rule does not limit the caller: the numbers
	// below are then zero.
	Exempt    bool   `json:"exempt"`
	Algorithm string `json:"algorithm"`
	// Limit is the capacity, what a full caller may spend at once, over
	// WindowSeconds (the quota window; for a calendar rule the longest of
	// its windows: ResetAt says when this one ends).
	Limit         int64   `json:"limit"`
	WindowSeconds float64 `json:"window_seconds"`
	// Calendar, Timezone and Anchor are a calendar rule's (sluice.Rule's):
	// its windows are the calendar's days, weeks, months or years.
	Calendar string `json:"calendar,omitempty"`
	Timezone string `json:"timezone,omitempty"`
	Anchor   string `json:"anchor,omitempty"`
	// Cost is what one request spends under the rule.
	Cost int64 `json:"cost"`
	// Remaining is what the caller may spend now; InUse, for a
	// concurrency limit, the slots it holds.
	Remaining int64 `json:"remaining"`
	InUse     int64 `json:"in_use,omitempty"`
	// Allowed reports whether a request of Cost would pass now;
	// RetryAfterSeconds how long until it would (0 when it would now).
	Allowed           bool    `json:"allowed"`
	RetryAfterSeconds float64 `json:"retry_after_seconds"`
	// ResetSeconds is how long until the whole capacity is back (0 when
	// it is), ResetAt when (RFC 3339, UTC).
	ResetSeconds float64 `json:"reset_seconds"`
	ResetAt      string  `json:"reset_at"`
}

// NewUsageBody returns u as a UsageBody.
func NewUsageBody(u sluice.Usage) UsageBody {
	out := UsageBody{At: u.At.UTC().Format(time.RFC3339Nano), Plan: u.Plan, Limits: make([]LimitBody, 0, len(u.Limits))}
	for _, l := range u.Limits {
		r := l.Rule.Rule()
		out.Limits = append(out.Limits, LimitBody{
			Rule: r.Name, Method: r.Method, PathPrefix: r.PathPrefix, Host: r.Host, Scope: string(r.Scope),
			Shadow: r.Shadow, Key: identity.ShowKey(l.Key), Override: l.Override, Exempt: l.Exempt,
			Algorithm: string(r.Algorithm), Limit: l.Limit, WindowSeconds: l.Window.Seconds(),
			Calendar: r.Calendar, Timezone: r.Timezone, Anchor: r.Anchor, Cost: l.Cost,
			Remaining: l.Remaining, InUse: l.InUse, Allowed: l.Allowed,
			RetryAfterSeconds: l.RetryAfter.Seconds(), ResetSeconds: l.Reset.Seconds(),
			ResetAt: u.At.Add(l.Reset).UTC().Format(time.RFC3339Nano),
		})
	}
	return out
}

// WriteUsage answers u as JSON (NewUsageBody), 200, uncached.
func WriteUsage(w http.ResponseWriter, u sluice.Usage) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(NewUsageBody(u))
}
