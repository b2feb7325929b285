package httplimit

import (
	"errors"
	"net/http"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/identity"
)

// Plans and overrides in the middleware: when the rules in force name a
// plan, the caller's plan is found once per request, before matching —
// from the IdentityFunc's Caller.Plan when there is an IdentityFunc, else
// (or when it gives none) from the identity section's plan header, read
// only from a trusted proxy (identity.Identifier.PlanFor) — and the
// request is matched with sluice.Ruleset.MatchPlan. Each matched rule is
// then replaced by the caller's override, if it has one
// (sluice.Ruleset.Override), once its key is known. A ruleset without plan
// rules costs no identity work for the plan; one without overrides no
// lookup.

// callerPlan returns the plan of r's caller when rs has rules with a plan,
// and "" otherwise. ok is false when it has answered the request itself: a
// bad plan (identity.ErrBadIdentity) is answered 400, an IdentityFunc error
// or panic 500, as for a key.
// It is small enough to be inlined, so that a ruleset without plans costs
// the door one test.
func (l *limiter) callerPlan(w http.ResponseWriter, r *http.Request, rs *sluice.Ruleset) (plan string, ok bool) {
	if rs.HasPlans() {
		plan, ok = l.planOf(w, r)
		return
	}
	return "", true
}

// planOf is callerPlan for a ruleset with plans.
func (l *limiter) planOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	plan, err := l.findPlan(r)
	if err == nil {
		return plan, true
	}
	if errors.Is(err, identity.ErrBadIdentity) {
		http.Error(w, "bad caller identity", http.StatusBadRequest)
		return "", false
	}
	var pe *panicError
	if errors.As(err, &pe) {
		l.log.Error("httplimit: identity function panicked; request refused",
			"method", r.Method, "path", r.URL.Path, "panic", pe.value)
	} else {
		l.log.Error("httplimit: cannot find the caller's plan",
			"method", r.Method, "path", r.URL.Path, "err", err)
	}
	http.Error(w, internalErrorBody, http.StatusInternalServerError)
	return "", false
}

// findPlan reads the plan of r's caller; a panic in the IdentityFunc is
// returned as a *panicError.
func (l *limiter) findPlan(r *http.Request) (plan string, err error) {
	if l.identify == nil {
		return l.id.Plan(r.RemoteAddr, header(r.Header))
	}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			err = &panicError{value: v}
		}
	}()
	who, err := l.identify(r)
	if err != nil {
		return "", err
	}
	return l.id.PlanFor(who, r.RemoteAddr, header(r.Header))
}
