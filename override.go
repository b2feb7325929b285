package sluice

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-go/sluice/backend"
)

// Override gives one caller its own limit under one rule: a partner on a
// negotiated quota, a noisy customer held lower, an internal tool let
// through. The caller is named by its key, the key a door counts it under
// (package identity: "user:" and the user id, "key:" and the hash of the
// API key, "ip:" and the address or IPv6 prefix); identity's
// Identifier.ParseKey turns what an operator writes ("key:" and the raw API
// key) into it, so that no one ever writes a hash.
//
// The override keeps the rule's name, scope, algorithm, cost and plan, so
// its caller's record is the one it had under the rule: giving a caller an
// override, changing it or removing it on a reload keeps what the caller has
// spent, as a changed limit does for a rule. Only the fields given change.
type Override struct {
	// Rule is the name of the rule (or of the default) the override
	// applies under. Required.
	Rule string
	// Key is the caller's key as the doors build it. Required. Under a user
	// rule it is "user:…", or "ip:…" for the anonymous callers of an
	// address; under an api_key rule "key:…" or "ip:…"; under an ip rule
	// "ip:…"; under a header:NAME, attr:NAME or param:NAME rule
	// "header:…", "attr:…" or "param:…" and the value (an org's id, say),
	// or "ip:…" but under param:NAME. A global rule has one budget for all
	// and takes no override.
	Key string
	// Limit replaces the rule's Limit; zero keeps it.
	Limit int64
	// Window replaces the rule's Window; zero keeps it.
	Window time.Duration
	// Burst replaces the rule's Burst (bucket algorithms only); zero keeps
	// it.
	Burst int64
}

// OverrideError reports what is wrong with one override. It matches
// ErrInvalidConfig and unwraps to the cause, if any (a *RuleError when the
// override's limit does not compile).
type OverrideError struct {
	// Index is the override's position in the list given to
	// Ruleset.WithOverrides.
	Index int
	// Rule and Key are the override's.
	Rule, Key string
	// Field is the configuration name of the offending field: "rule",
	// "caller", "limit", "window" or "burst".
	Field string
	// Reason says what is wrong with it.
	Reason string
	// Err is the underlying error, or nil.
	Err error
}

// Error returns `override for "key" on rule "name": field: reason`.
func (e *OverrideError) Error() string {
	return fmt.Sprintf("override for %q on rule %q: %s: %s", e.Key, e.Rule, e.Field, e.Reason)
}

// Unwrap returns the underlying error, if any.
func (e *OverrideError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalidConfig.
func (e *OverrideError) Is(target error) bool { return target == ErrInvalidConfig }

// overrideKey finds an override: the rule it applies under and the
// caller's key.
type overrideKey struct {
	rule *CompiledRule
	key  string
}

// overrideSet is a ruleset's overrides, compiled.
type overrideSet struct {
	byKey map[overrideKey]*CompiledRule
	list  []Override // as given
}

// WithOverrides returns a ruleset with rs's rules and the given overrides
// (replacing any rs had), validated and compiled; rs is unchanged. Errors
// are *OverrideError values naming the override by Index and the field: an
// unknown rule, a key that does not fit the rule's scope, an override that
// changes nothing, a second override for one caller under one rule, and a
// limit, window or burst the rule's algorithm refuses (including a cost
// above the override's capacity).
func (rs *Ruleset) WithOverrides(ovs []Override) (*Ruleset, error) {
	out := *rs
	out.overrides = nil
	if len(ovs) == 0 {
		return &out, nil
	}
	set := &overrideSet{byKey: make(map[overrideKey]*CompiledRule, len(ovs)), list: append([]Override(nil), ovs...)}
	firsts := make(map[overrideKey]int, len(ovs))
	for i, o := range ovs {
		fail := func(field, format string, args ...any) error {
			return &OverrideError{Index: i, Rule: o.Rule, Key: o.Key, Field: field, Reason: fmt.Sprintf(format, args...)}
		}
		c := rs.Rule(o.Rule)
		switch {
		case o.Rule == "":
			return nil, fail("rule", "required")
		case c == nil:
			return nil, fail("rule", "no rule or default is named %q", o.Rule)
		}
		if reason := keyFitsScope(o.Key, c.rule.Scope); reason != "" {
			return nil, fail("caller", "%s", reason)
		}
		if o.Limit == 0 && o.Window == 0 && o.Burst == 0 {
			return nil, fail("limit", "give the caller's own limit, window or burst")
		}
		k := overrideKey{c, o.Key}
		if j, dup := firsts[k]; dup {
			return nil, fail("caller", "overrides[%d] gives this caller its own limit on this rule already", j)
		}
		firsts[k] = i
		r := c.rule
		for _, f := range []struct {
			name string
			v    int64
		}{{"limit", o.Limit}, {"window", int64(o.Window)}, {"burst", o.Burst}} {
			if f.v < 0 {
				return nil, fail(f.name, "must be positive, got %d", f.v)
			}
		}
		if o.Limit != 0 {
			r.Limit = o.Limit
		}
		if o.Window != 0 {
			r.Window = o.Window
		}
		if o.Burst != 0 {
			r.Burst = o.Burst
		}
		oc, err := r.compile()
		if err != nil {
			var re *RuleError
			if errors.As(err, &re) {
				return nil, &OverrideError{Index: i, Rule: o.Rule, Key: o.Key, Field: re.Field, Reason: re.Reason, Err: err}
			}
			return nil, &OverrideError{Index: i, Rule: o.Rule, Key: o.Key, Field: "limit", Reason: err.Error(), Err: err}
		}
		oc.origin = c
		set.byKey[k] = oc
	}
	out.overrides = set
	return &out, nil
}

// keyFitsScope says why an override for key can never apply under a rule
// of scope, or "".
func keyFitsScope(key string, scope Scope) string {
	kind, id, ok := strings.Cut(key, ":")
	if key == "" {
		return "required: " + overrideForms
	}
	if scope == ScopeGlobal {
		return "a global rule has one budget shared by every caller; change the rule's own limit"
	}
	if _, own, nested := backend.SplitNested(key); nested {
		return fmt.Sprintf("an override names the caller's own key, such as %q, and holds within every tenant; a key within a tenant is none", own)
	}
	if !ok || id == "" {
		return fmt.Sprintf("want %s, got %q", overrideForms, key)
	}
	want, _, _ := strings.Cut(string(scope), ":")
	switch kind {
	case "ip":
		if scope.Param() == "" {
			return "" // an ip rule's callers, and the anonymous callers of the others
		}
	case "user", "key", "header", "attr", "param":
		if want == "api_"+kind || want == kind {
			return ""
		}
	default:
		return fmt.Sprintf("want %s, got %q", overrideForms, key)
	}
	return fmt.Sprintf("a %s: caller is never counted by a rule scoped %s", kind, scope)
}

// overrideForms lists the caller keys of an override, for errors.
const overrideForms = "user:ID, key:API_KEY, ip:ADDRESS, header:VALUE, attr:VALUE or param:VALUE"

// Override returns the rule a caller with the given key is decided under
// when c applies to it: c with the caller's own limit, window or burst when
// an override names the caller under c, else c itself. A caller's key
// within its tenant (backend.NestedKey: group.go) is the caller's own for
// this, so that an override of "user:alice" holds in every tenant. The
// rule returned
// has c's name, so it counts in c's namespace and is reported as c. It
// allocates nothing.
func (rs *Ruleset) Override(c *CompiledRule, key string) *CompiledRule {
	if rs.overrides == nil {
		return c
	}
	if o, ok := rs.overrides.byKey[overrideKey{c, key}]; ok {
		return o
	}
	if _, own, ok := backend.SplitNested(key); ok { // a level's key within its tenant (group.go)
		if o, ok := rs.overrides.byKey[overrideKey{c, own}]; ok {
			return o
		}
	}
	return c
}
