package httplimit

import "net/http"

// Plans and overrides in the middleware: when the rules in force name a plan,
// the caller's plan is found once per request, before matching — from the
// IdentityFunc's Caller.Plan when there is an IdentityFunc, else (or when it
// gives none) from the identity section's plan header, read only from a trusted
// proxy (identity.Identifier.PlanFor) — and the request is matched with its
// plan (sluice.RequestShape.Plan). Each matched rule is then replaced by the
// caller's override, if it has one (sluice.Ruleset.Override), once its key is
// known. A ruleset without plan rules costs no identity work for the plan; one
// without overrides no lookup. The Door (sluice.Door) does both; the middleware
// reads the plan for it.

// plan is the Door's Plan: the plan of r's caller, from the IdentityFunc
// when there is one, else (or when it gives none) from the plan header.
// The Door asks for it only when a rule names a plan, and contains a panic
// in the IdentityFunc.
func (l *limiter) plan(r *http.Request) (string, error) {
	if l.identify == nil {
		return l.id.Plan(r.RemoteAddr, header(r.Header))
	}
	who, err := l.identify(r)
	if err != nil {
		return "", err
	}
	return l.id.PlanFor(who, r.RemoteAddr, header(r.Header))
}
