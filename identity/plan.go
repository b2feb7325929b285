package identity

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/sluice-go/sluice"
)

// ErrBadPlan: the plan in the plan header, or in a Caller the program
// supplied, is not a valid plan name (sluice.ValidPlan). It matches
// ErrBadIdentity.
var ErrBadPlan = fmt.Errorf("%w: invalid plan", ErrBadIdentity)

// ErrBadKey is matched by every error of ParseKey: a caller key, as an
// operator writes one, that does not parse.
var ErrBadKey = errors.New("sluice/identity: bad caller key")

// Plan returns the plan of a request's caller, for rules with a plan
// (sluice.RequestShape.Plan), read from the configured plan header
// (Config.PlanHeader), or "" for none. The header is read only when the
// peer remote (the connection's address, as Key takes it) is a trusted
// proxy; from any other peer, and when no plan header is configured, the
// caller is on no plan. A header given twice is an ErrAmbiguousIdentity;
// a value that is not a valid plan name (after trimming spaces and tabs)
// is an ErrBadPlan; both match ErrBadIdentity. An empty value is no plan.
func (id *Identifier) Plan(remote string, h Header) (string, error) {
	if id.planHeader == "" || !id.remoteTrusted(remote) {
		return "", nil
	}
	vs := values(h, id.planHeader)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", fmt.Errorf("%w: %s", ErrAmbiguousIdentity, id.planHeader)
	}
	p := trimOWS(vs[0])
	if p != "" && !sluice.ValidPlan(p) {
		return "", badPlan(id.planHeader, p)
	}
	return p, nil
}

// PlanFor is Plan for a caller the program has identified itself: who's
// Plan when it has one (an invalid name is an ErrBadPlan), else what Plan
// reads from a trusted proxy's plan header.
func (id *Identifier) PlanFor(who Caller, remote string, h Header) (string, error) {
	if who.Plan != "" {
		if !sluice.ValidPlan(who.Plan) {
			return "", badPlan("Caller.Plan", who.Plan)
		}
		return who.Plan, nil
	}
	return id.Plan(remote, h)
}

func badPlan(where, p string) error {
	if len(p) > sluice.MaxPlanLen {
		p = p[:sluice.MaxPlanLen] + "..."
	}
	return fmt.Errorf("%w: %s: %q is not a plan name (1 to %d letters, digits, '_', '-' or '.')", ErrBadPlan, where, p, sluice.MaxPlanLen)
}

// ParseKey returns the caller key that s names, s being written as an
// operator writes it: in a configuration's overrides, to sluice reset, to
// the admin endpoints. The forms are those of Key's results, with the API
// key written in the clear:
//
//	user:ID        the user ID, as sent ("user:alice")
//	key:API_KEY    the API key itself, hashed here as Key hashes it, so
//	               that no one ever has to compute or copy a hash
//	keyhash:HEX    an API key's hash as Key's results, logs and sluice
//	               inspect show it (32 hex digits), for a key known only
//	               by its hash
//	ip:ADDRESS     an address; an IPv6 one stands for its prefix of the
//	               configured length, as Key groups it ("ip:2001:db8::1"
//	               is "ip:2001:db8::/64"); the prefix itself may be given
//	header:VALUE   a value of the header a header:NAME rule counts by
//	attr:VALUE     a value of the attribute an attr:NAME rule counts by
//	param:VALUE    a value of the path parameter a param:NAME rule counts by
//	global         the one key of a global rule
//	{TENANT}KEY    a level's key within its tenant (a user's within an
//	               organisation, in a group of rules), as ShowKey shows
//	               it: TENANT a header:VALUE or attr:VALUE key with '%',
//	               '{' and '}' written as %25, %7B and %7D, KEY any of the
//	               forms above ("{attr:acme}user:alice")
//
// Errors match ErrBadKey and say what is expected.
func (id *Identifier) ParseKey(s string) (string, error) {
	if s == "global" {
		return s, nil
	}
	if rest, ok := strings.CutPrefix(s, "{"); ok {
		return id.parseNested(rest)
	}
	// What an operator mistyped may be an API key: the errors show the
	// kind before the colon, never what follows it, nor a key without one.
	kind, v, ok := strings.Cut(s, ":")
	if !ok {
		return "", fmt.Errorf("%w: want "+keyForms+", got %d bytes with no kind and colon before them (not shown: they may be an API key)", ErrBadKey, len(s))
	}
	if v == "" {
		if !knownKind(kind) {
			return "", fmt.Errorf("%w: want "+keyForms+"; what was given has none of these kinds before its colon (not shown: it may be an API key)", ErrBadKey)
		}
		return "", fmt.Errorf("%w: want "+keyForms+", got nothing after %q", ErrBadKey, kind+":")
	}
	if trimOWS(v) != v {
		return "", fmt.Errorf("%w: spaces around what follows %s:, which no caller key has", ErrBadKey, kind)
	}
	switch kind {
	case "user":
		if len(v) > MaxUserIDLen {
			return "", fmt.Errorf("%w: the user id is %d bytes, over %d", ErrBadKey, len(v), MaxUserIDLen)
		}
		return s, nil
	case "header", "attr", "param":
		if len(v) > sluice.MaxAttrLen {
			return "", fmt.Errorf("%w: the %s value is %d bytes, over %d", ErrBadKey, kind, len(v), sluice.MaxAttrLen)
		}
		return s, nil
	case "key":
		if len(v) > MaxAPIKeyLen {
			return "", fmt.Errorf("%w: the API key is %d bytes, over %d", ErrBadKey, len(v), MaxAPIKeyLen)
		}
		return hashAPIKey(v), nil
	case "keyhash":
		if len(v) != 32 || !isLowerHex(v) {
			return "", fmt.Errorf("%w: keyhash: want the 32 lower-case hex digits of a key: caller key, got %q", ErrBadKey, clip(v))
		}
		return "key:" + v, nil
	case "ip":
		if strings.Contains(v, "/") {
			p, err := netip.ParsePrefix(v)
			if err != nil || p.Addr().Zone() != "" {
				return "", fmt.Errorf("%w: ip: want an address or an IPv6 prefix, got %q", ErrBadKey, clip(v))
			}
			if a := p.Addr(); a.Is4() || a.Is4In6() || p.Bits() != id.v6bits {
				return "", fmt.Errorf("%w: ip: callers are counted by IPv4 address and IPv6 /%d prefix, so %q names none; write the address", ErrBadKey, id.v6bits, v)
			}
			return id.IPKey(p.Addr()), nil
		}
		a, err := netip.ParseAddr(v)
		if err != nil || a.Zone() != "" {
			return "", fmt.Errorf("%w: ip: want an address such as 192.0.2.1 or 2001:db8::1, got %q", ErrBadKey, clip(v))
		}
		return id.IPKey(a), nil
	}
	return "", fmt.Errorf("%w: want "+keyForms+"; what was given has none of these kinds before its colon (not shown: it may be an API key)", ErrBadKey)
}

// parseNested is ParseKey of "{" + s: a level's key within its tenant.
func (id *Identifier) parseNested(s string) (string, error) {
	shown, own, ok := strings.Cut(s, "}")
	if !ok {
		return "", fmt.Errorf("%w: a key within its tenant is {TENANT}KEY, such as {attr:acme}user:alice; got no '}'", ErrBadKey)
	}
	text, ok := unescapeTenant(shown)
	if !ok {
		return "", fmt.Errorf("%w: in {TENANT}KEY, write '%%', '{' and '}' in TENANT as %%25, %%7B and %%7D", ErrBadKey)
	}
	if !strings.HasPrefix(text, "attr:") && !strings.HasPrefix(text, "header:") {
		return "", fmt.Errorf("%w: in {TENANT}KEY, TENANT is an attr:VALUE or header:VALUE key, such as {attr:acme}user:alice", ErrBadKey)
	}
	tenant, err := id.ParseKey(text)
	if err != nil {
		return "", fmt.Errorf("the tenant of {TENANT}KEY: %w", err)
	}
	key, err := id.ParseKey(own)
	if err != nil {
		return "", err
	}
	if isNested(key) {
		return "", fmt.Errorf("%w: in {TENANT}KEY, KEY is a caller's own key, not one within a tenant again", ErrBadKey)
	}
	return sluice.NestedKey(tenant, key), nil
}

// keyForms lists the caller keys ParseKey reads, for errors.
const keyForms = "user:ID, key:API_KEY, keyhash:HEX, ip:ADDRESS, header:VALUE, attr:VALUE, param:VALUE or global"

// knownKind reports a kind ParseKey reads.
func knownKind(kind string) bool {
	switch kind {
	case "user", "key", "keyhash", "ip", "header", "attr", "param":
		return true
	}
	return false
}

func isLowerHex(s string) bool {
	if _, err := hex.DecodeString(s); err != nil {
		return false
	}
	return strings.ToLower(s) == s
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// isNested reports whether key is a level's within its tenant
// (sluice.NestedKey).
func isNested(key string) bool {
	_, _, ok := sluice.SplitNestedKey(key)
	return ok
}
