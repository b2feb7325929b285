package grpclimit

import (
	"context"

	"github.com/sluice-go/sluice/identity"
)

// Plans and overrides in the interceptors, as in package httplimit: when
// the rules in force name a plan (sluice.Rule.Plan), the caller's plan is
// found once per call, before matching — from the IdentityFunc's
// Caller.Plan when there is an IdentityFunc, else (or when it gives none)
// from the identity configuration's plan header (identity.Config.PlanHeader)
// read as request metadata under its lower-case name ("x-sluice-plan"), and
// believed only when the peer is a trusted proxy — and the call is matched
// with sluice.Ruleset.MatchPlan. Each matched rule is then replaced by the
// caller's override, if it has one (sluice.Ruleset.Override), once its key
// is known. A ruleset without plan rules costs no identity work for the
// plan; one without overrides no lookup.
//
// A bad plan (not a valid plan name, or the plan metadata sent twice: both
// identity.ErrBadIdentity) ends the call with codes.InvalidArgument; the
// IdentityFunc's errors and panics end it as they do when it is asked for
// a key.

// callerPlan returns the plan of the call's caller. A panic in the
// IdentityFunc is returned as a *panicError.
func (l *Limiter) callerPlan(ctx context.Context, method string) (plan string, err error) {
	h := incoming{ctx}
	var who identity.Caller
	if l.identify != nil {
		func() {
			defer func() {
				if v := recover(); v != nil {
					err = &panicError{value: v}
				}
			}()
			who, err = l.identify(ctx, method)
		}()
		if err != nil {
			return "", &identityFuncError{err: err}
		}
		if who.Plan != "" {
			return l.id.PlanFor(who, "", h)
		}
	}
	// The peer is asked for only when its word (the plan metadata) may be
	// believed: from no peer, no plan.
	remote, err := peerString(ctx)
	if err != nil {
		return "", nil
	}
	return l.id.Plan(remote, h)
}

// planError returns the status of a call whose plan could not be had, and
// logs what is not the client's fault.
func (l *Limiter) planError(method string, err error) error {
	return l.callerError(err, "cannot find the caller's plan", "identity function panicked", "method", method)
}
