package grpclimit

// Plans and overrides in the interceptors, as in package httplimit: when the
// rules in force name a plan (sluice.Rule.Plan), the caller's plan is found
// once per call, before matching — from the IdentityFunc's Caller.Plan when
// there is an IdentityFunc, else (or when it gives none) from the identity
// configuration's plan header (identity.Config.PlanHeader) read as request
// metadata under its lower-case name ("x-sluice-plan"), and believed only when
// the peer is a trusted proxy — and the call is matched with its plan
// (sluice.RequestShape.Plan). Each matched rule is then replaced by the
// caller's override, if it has one (sluice.Ruleset.Override), once its key is
// known. A ruleset without plan rules costs no identity work for the plan; one
// without overrides no lookup.
//
// A bad plan (not a valid plan name, or the plan metadata sent twice: both
// identity.ErrBadIdentity) ends the call with codes.InvalidArgument; the
// IdentityFunc's errors and panics end it as they do when it is asked for
// a key.

// plan is the Door's Plan: the plan of c's caller, from the IdentityFunc
// when there is one, else (or when it gives none) from the plan metadata.
// The Door asks for it only when a rule names a plan, and contains a panic
// in the IdentityFunc.
func (l *Limiter) plan(c call) (string, error) {
	h := incoming{c.ctx}
	if l.identify != nil {
		who, err := l.identify(c.ctx, c.method)
		if err != nil {
			return "", &identityFuncError{err: err}
		}
		if who.Plan != "" {
			return l.id.PlanFor(who, "", h)
		}
	}
	// The peer is asked for only when its word (the plan metadata) may be
	// believed: from no peer, no plan.
	remote, err := peerString(c.ctx)
	if err != nil {
		return "", nil
	}
	return l.id.Plan(remote, h)
}
