package config

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/internal/configerr"
)

// The "overrides" section gives single callers their own limit on a rule:
//
//	overrides:
//	  - rule: orders-write      # a rule's or the default's name
//	    caller: user:alice      # user:ID, key:API_KEY, keyhash:HEX or ip:ADDRESS
//	    limit: 100              # any of limit, window and burst; the rest is the rule's
//	  - rule: search
//	    caller: key:sk_live_51H8  # the API key itself: it is hashed here, as the doors hash it
//	    limit: 1000
//	    window: 1h
//
// The caller is written as identity.Identifier.ParseKey reads it, under
// the file's identity section (its ipv6_prefix groups an IPv6 caller), so
// an operator never writes a hash. The algorithm, scope, cost and plan stay
// the rule's, and so does the caller's record: an override added, changed
// or removed by a reload keeps what the caller has spent. Errors name the
// override and its key: overrides[2].caller, overrides[0].limit.

// overrideNode is one override as read, before its caller is parsed.
type overrideNode struct {
	o      sluice.Override // Key not yet set
	caller string          // as written
	line   int             // the override's mapping
	lines  map[string]int  // each key's line
}

// overrides reads the overrides section.
func (p *parser) overrides(n *yaml.Node, path string) error {
	if n.Kind != yaml.SequenceNode {
		return p.Want(n, path, "a list of overrides")
	}
	p.overrideNodes = make([]overrideNode, 0, len(n.Content))
	for i, item := range n.Content {
		field := fmt.Sprintf("%s[%d]", path, i)
		on := overrideNode{line: item.Line, lines: map[string]int{}}
		err := p.Fields(item, field, func(key string, v *yaml.Node, f string) (bool, error) {
			on.lines[key] = v.Line
			var err error
			switch key {
			case "rule":
				on.o.Rule, err = p.Str(v, f)
			case "caller":
				on.caller, err = p.Str(v, f)
			case "limit":
				on.o.Limit, err = p.positive(v, f)
			case "window":
				on.o.Window, err = p.Duration(v, f)
				if err == nil && on.o.Window <= 0 {
					err = p.Errorf(v.Line, f, "must be positive, got %v", on.o.Window)
				}
			case "burst":
				on.o.Burst, err = p.positive(v, f)
			default:
				return false, nil
			}
			return true, err
		})
		if err != nil {
			return err
		}
		for _, req := range []string{"rule", "caller"} {
			if _, given := on.lines[req]; !given {
				return p.Errorf(item.Line, configerr.Join(field, req), "required")
			}
		}
		p.overrideNodes = append(p.overrideNodes, on)
	}
	return nil
}

// positive reads an integer that must be above zero.
func (p *parser) positive(v *yaml.Node, field string) (int64, error) {
	n, err := p.Int(v, field)
	if err == nil && n <= 0 {
		err = p.Errorf(v.Line, field, "must be positive, got %d", n)
	}
	return n, err
}

// applyOverrides parses the overrides' callers under c's identity section,
// sets c.Overrides and returns rs with them.
func (p *parser) applyOverrides(rs *sluice.Ruleset, c *Config) (*sluice.Ruleset, error) {
	if len(p.overrideNodes) == 0 {
		return rs, nil
	}
	id, err := identity.New(c.Identity)
	if err != nil {
		return nil, &Error{File: p.File, Field: "identity", Reason: err.Error(), Err: err}
	}
	c.Overrides = make([]sluice.Override, len(p.overrideNodes))
	for i, on := range p.overrideNodes {
		key, err := id.ParseKey(on.caller)
		if err != nil {
			return nil, p.Errorf(on.lines["caller"], fmt.Sprintf("overrides[%d].caller", i), "%v", err)
		}
		on.o.Key = key
		c.Overrides[i] = on.o
	}
	out, err := rs.WithOverrides(c.Overrides)
	if err != nil {
		var oe *sluice.OverrideError
		if !errors.As(err, &oe) || oe.Index < 0 || oe.Index >= len(p.overrideNodes) {
			return nil, &Error{File: p.File, Field: "overrides", Reason: err.Error(), Err: err}
		}
		on := p.overrideNodes[oe.Index]
		line, ok := on.lines[oe.Field]
		if !ok {
			line = on.line
		}
		return nil, &Error{File: p.File, Line: line, Field: fmt.Sprintf("overrides[%d].%s", oe.Index, oe.Field),
			Reason: fmt.Sprintf("rule %q, caller %s: %s", oe.Rule, shownCaller(on.caller, oe.Key), oe.Reason), Err: err}
	}
	return out, nil
}

// shownCaller is how an error names a caller written as written, except an
// API key: that is a secret, shown as its hash.
func shownCaller(written, key string) string {
	if strings.HasPrefix(written, "key:") {
		return "an API key (" + key + ")"
	}
	return written
}
