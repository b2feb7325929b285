package httplimit

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/identity"
)

// IdentityFunc is the embedding program's hook for the caller's identity,
// typically read from credentials an earlier middleware has verified (a
// token's subject in the request context). It is called only for rules
// scoped user, api_key or attr:NAME (identity.Caller.With sets the
// attributes); an anonymous result (empty fields) is counted by IP
// address. A returned error is answered 400 when it matches
// identity.ErrBadIdentity and 500 otherwise. An IdentityFunc must be safe
// for concurrent use.
type IdentityFunc func(*http.Request) (identity.Caller, error)

// header reads an http.Header by a name already in canonical form, as
// package identity passes them, without canonicalising it again.
type header http.Header

// Values implements identity.Header.
func (h header) Values(name string) []string { return h[name] }

// callerKey returns the key the caller of r is counted under by a rule of the
// given scope (see identity.Identifier.Key). With fn set, fn supplies the
// identity instead of the headers. A panic in fn is not recovered here.
func callerKey(id *identity.Identifier, fn IdentityFunc, r *http.Request, scope sluice.Scope) (string, error) {
	var (
		k   string
		err error
	)
	if fn != nil && (scope == sluice.ScopeUser || scope == sluice.ScopeAPIKey || scope.Attr() != "") {
		who, ferr := fn(r)
		if ferr != nil {
			return "", fmt.Errorf("sluice/httplimit: identity: %w", ferr)
		}
		k, err = id.KeyFor(scope, who, r.RemoteAddr, header(r.Header))
	} else {
		k, err = id.Key(scope, r.RemoteAddr, header(r.Header))
	}
	if err != nil && errors.Is(err, identity.ErrNoPeerAddr) {
		err = fmt.Errorf("sluice/httplimit: RemoteAddr: %w", err)
	}
	return k, err
}

// key is the Door's Key: the key r's caller is counted under by rule
// (callerKey), and what r spends under it: for a rule with Settle, its
// estimate (settle.go), else what Config.Cost says. The Door contains a
// panic in the IdentityFunc or the Cost function.
func (l *limiter) key(r *http.Request, rule *sluice.CompiledRule) (string, int64, error) {
	key, err := callerKey(l.id, l.identify, r, rule.Scope())
	if err != nil {
		return key, 0, err
	}
	if s := rule.Settle(); s != nil {
		n, err := estimate(r, s)
		return key, n, err
	}
	if l.cost == nil {
		return key, 0, nil
	}
	return key, l.cost(r, rule), nil
}
