package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
)

// The store backends a configuration may name.
const (
	BackendMemory = "memory"
	BackendPebble = "pebble"
	BackendBolt   = "bolt"
)

// Defaults a parsed Config holds for the store keys a file leaves out. The
// identity section's are package identity's (identity.Config.WithDefaults).
const (
	DefaultBackend       = BackendMemory
	DefaultFlushInterval = engine.DefaultFlushInterval
)

// Config is a gateway's configuration, as read from a YAML file by Parse
// or Load, which fill in every default: a parsed Config holds the values in
// force, not blanks.
//
// The store section is read when the program starts; a reload applies the
// rest.
type Config struct {
	// Store is the "store" section.
	Store Store
	// Identity is the "identity" section, read straight into the identity
	// package's configuration.
	Identity identity.Config
	// OnStoreError is "on_store_error": sluice.FailOpen (default) or
	// sluice.FailClosed.
	OnStoreError sluice.StoreErrorPolicy
	// Match is "match": sluice.MatchMostSpecific (default) or
	// sluice.MatchAll.
	Match sluice.MatchMode
	// Rules is "rules", in file order.
	Rules []sluice.Rule
	// Default is "default", the rule for requests no rule covers, or nil.
	Default *sluice.Rule

	ruleset *sluice.Ruleset // compiled from the above by Parse
}

// Store is the "store" section: where the limiter keeps its state.
type Store struct {
	// Backend is "backend": BackendMemory (default), BackendPebble or
	// BackendBolt.
	Backend string
	// Dir is "dir", the state directory of a durable backend; required for
	// pebble and bolt.
	Dir string
	// Durability is "durability": engine.Interval ("interval", default) or
	// engine.Sync ("sync"). It applies to the durable backends.
	Durability engine.Durability
	// FlushInterval is "flush_interval", how often interval durability
	// writes; DefaultFlushInterval (50ms) when left out.
	FlushInterval time.Duration
}

// Error reports a configuration that does not parse or validate, with the
// place and the key at fault. It matches sluice.ErrInvalidConfig and
// unwraps to the cause (a *sluice.RuleError for an invalid rule).
type Error struct {
	// File is the name the configuration was parsed under.
	File string
	// Line is the 1-based line at fault, or 0 when unknown.
	Line int
	// Field is the path of the key at fault, such as "rules[1].window", or
	// empty for the document as a whole.
	Field string
	// Reason says what is wrong.
	Reason string
	// Err is the underlying error, or nil.
	Err error
}

// Error returns "file:line: field: reason", leaving out what is unknown.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is sluice.ErrInvalidConfig.
func (e *Error) Is(target error) bool { return target == sluice.ErrInvalidConfig }

// Ruleset returns the configuration's rules, default and match mode
// compiled. For a Config from Parse it is the ruleset validated there; for
// one built by hand it is compiled now.
func (c *Config) Ruleset() (*sluice.Ruleset, error) {
	if c.ruleset != nil {
		return c.ruleset, nil
	}
	return sluice.NewRuleset(c.Rules, c.Default, c.Match)
}

// Load reads and parses the configuration file at path. See Parse.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse parses a YAML configuration; name is what errors call the
// file. Every key is checked: an unknown key, a value of the wrong type, a
// duration that time.ParseDuration refuses ("1 minute") and an invalid rule
// are *Error values naming the line and the key, such as
//
//	config.yaml:12: rules[1].window: want a duration such as 1m or 500ms, got "1 minute"
//
// An empty document is an error too, so that a file caught half-written
// during a reload is rejected rather than read as "no limits". Anchors and
// aliases are not supported. The result holds every default filled in.
func Parse(name string, data []byte) (*Config, error) {
	p := parser{file: name}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, p.errAt(0, "", "the configuration is empty")
		}
		return nil, p.yamlError(err, data)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, p.yamlError(err, data)
		}
		return nil, p.errAt(extra.Line, "", "want one YAML document, found another")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, p.errAt(0, "", "the configuration is empty")
		}
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, p.errAt(root.Line, "", "the configuration is empty")
	}
	c := &Config{
		Store:        Store{Backend: DefaultBackend, Durability: engine.Interval, FlushInterval: DefaultFlushInterval},
		Identity:     identity.Config{}.WithDefaults(),
		OnStoreError: sluice.FailOpen,
		Match:        sluice.MatchMostSpecific,
	}
	if err := p.config(root, c); err != nil {
		return nil, err
	}
	return c, nil
}

// parser walks a configuration's YAML node tree.
type parser struct {
	file      string
	ruleNodes []*yaml.Node // the mapping of each rule, by index
	defNode   *yaml.Node   // the default's mapping
	ruleLines []map[string]int
	defLines  map[string]int
}

func (p *parser) errAt(line int, field, format string, args ...any) *Error {
	return &Error{File: p.file, Line: line, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// yamlLine reads the line and the problem from a YAML syntax error. The
// YAML library gives no structured syntax error, only this text; a test
// (TestYAMLErrorText) pins it, so that an upgrade changing it fails loudly.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// maxLocateLines bounds the document yamlError searches for the line at
// fault, since the search parses every prefix.
const maxLocateLines = 2000

// yamlError turns a YAML syntax error in data into an *Error with its
// line. The library names the line where the enclosing block began, not the
// one at fault (a badly indented key on line 7 of a mapping opened on line
// 1 is reported on line 1), so the line is found anew: the first line at
// which the document cut there fails with the same problem.
func (p *parser) yamlError(err error, data []byte) *Error {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return &Error{File: p.file, Reason: strings.TrimPrefix(err.Error(), "yaml: "), Err: err}
	}
	line, _ := strconv.Atoi(m[1])
	if at := locateYAMLError(data, m[2]); at > 0 {
		line = at
	}
	return &Error{File: p.file, Line: line, Reason: m[2], Err: err}
}

// locateYAMLError returns the first line n such that the first n lines of
// data fail to parse with the given problem, or 0 when there is none (or
// data is too long to search).
func locateYAMLError(data []byte, problem string) int {
	if bytes.Count(data, []byte("\n")) > maxLocateLines {
		return 0
	}
	end := 0
	for n := 1; end < len(data); n++ {
		if i := bytes.IndexByte(data[end:], '\n'); i >= 0 {
			end += i + 1
		} else {
			end = len(data)
		}
		var doc yaml.Node
		dec := yaml.NewDecoder(bytes.NewReader(data[:end]))
		err := dec.Decode(&doc)
		for err == nil {
			err = dec.Decode(&doc)
		}
		if errors.Is(err, io.EOF) {
			continue
		}
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil && m[2] == problem {
			return n
		}
	}
	return 0
}

// join appends key to the field path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// describe names what a node holds, for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.Tag {
	case "!!null":
		return "nothing"
	case "!!int":
		return "the integer " + n.Value
	case "!!float":
		return "the number " + n.Value
	case "!!bool":
		return "the boolean " + n.Value
	}
	return strconv.Quote(n.Value)
}

// fields walks the mapping n at path, calling set for each key with the
// key's field path; set returns false for a key it does not know. Keys must
// be unique strings.
func (p *parser) fields(n *yaml.Node, path string, set func(key string, val *yaml.Node, field string) (bool, error)) error {
	if n.Kind != yaml.MappingNode {
		return p.notSupported(n, path, "a mapping")
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
			return p.errAt(k.Line, path, "want a key name, got %s", describe(k))
		}
		field := join(path, k.Value)
		if seen[k.Value] {
			return p.errAt(k.Line, field, "given twice")
		}
		seen[k.Value] = true
		if v.Kind == yaml.AliasNode || v.Anchor != "" {
			return p.errAt(v.Line, field, "anchors and aliases are not supported")
		}
		ok, err := set(k.Value, v, field)
		if err != nil {
			return err
		}
		if !ok {
			return p.errAt(k.Line, field, "unknown key")
		}
	}
	return nil
}

func (p *parser) notSupported(n *yaml.Node, field, want string) *Error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return p.errAt(n.Line, field, "anchors and aliases are not supported")
	}
	return p.errAt(n.Line, field, "want %s, got %s", want, describe(n))
}

func (p *parser) str(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", p.notSupported(n, field, "a string")
	}
	return n.Value, nil
}

// oneOf reads a string that must be one of choices.
func (p *parser) oneOf(n *yaml.Node, field string, choices ...string) (string, error) {
	s, err := p.str(n, field)
	if err != nil {
		return "", err
	}
	for _, c := range choices {
		if s == c {
			return s, nil
		}
	}
	return "", p.errAt(n.Line, field, "want one of %s, got %q", strings.Join(choices, ", "), s)
}

func (p *parser) integer(n *yaml.Node, field string) (int64, error) {
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		return 0, p.notSupported(n, field, "an integer")
	}
	return v, nil
}

func (p *parser) boolean(n *yaml.Node, field string) (bool, error) {
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		return false, p.notSupported(n, field, "true or false")
	}
	return v, nil
}

func (p *parser) duration(n *yaml.Node, field string) (time.Duration, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return 0, p.notSupported(n, field, "a duration such as 1m or 500ms")
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, p.errAt(n.Line, field, "want a duration such as 1m or 500ms, got %q", n.Value)
	}
	return d, nil
}

func (p *parser) config(root *yaml.Node, c *Config) error {
	err := p.fields(root, "", func(key string, v *yaml.Node, field string) (bool, error) {
		var err error
		switch key {
		case "store":
			err = p.store(v, field, &c.Store)
		case "identity":
			err = p.identity(v, field, &c.Identity)
		case "on_store_error":
			var s string
			s, err = p.oneOf(v, field, string(sluice.FailOpen), string(sluice.FailClosed))
			c.OnStoreError = sluice.StoreErrorPolicy(s)
		case "match":
			var s string
			s, err = p.oneOf(v, field, string(sluice.MatchMostSpecific), string(sluice.MatchAll))
			c.Match = sluice.MatchMode(s)
		case "rules":
			if v.Kind != yaml.SequenceNode {
				return true, p.notSupported(v, field, "a list of rules")
			}
			c.Rules = make([]sluice.Rule, 0, len(v.Content))
			for i, item := range v.Content {
				r, lines, err := p.rule(item, fmt.Sprintf("%s[%d]", field, i), false)
				if err != nil {
					return true, err
				}
				c.Rules = append(c.Rules, r)
				p.ruleNodes = append(p.ruleNodes, item)
				p.ruleLines = append(p.ruleLines, lines)
			}
		case "default":
			r, lines, err := p.rule(v, field, true)
			if err != nil {
				return true, err
			}
			c.Default, p.defNode, p.defLines = &r, v, lines
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return err
	}
	rs, err := sluice.NewRuleset(c.Rules, c.Default, c.Match)
	if err != nil {
		return p.ruleError(err)
	}
	c.ruleset = rs
	return nil
}

// ruleError places an error from sluice.NewRuleset on the line of the
// field at fault in the rule at fault.
func (p *parser) ruleError(err error) error {
	var re *sluice.RuleError
	if !errors.As(err, &re) {
		return &Error{File: p.file, Reason: err.Error(), Err: err}
	}
	node, lines, path := p.defNode, p.defLines, "default"
	if i := re.Index; i >= 0 && i < len(p.ruleNodes) {
		node, lines, path = p.ruleNodes[i], p.ruleLines[i], fmt.Sprintf("rules[%d]", i)
	}
	line, ok := lines[re.Field]
	if !ok && node != nil {
		line = node.Line
	}
	reason := re.Reason
	if re.Rule != "" {
		reason = fmt.Sprintf("rule %q: %s", re.Rule, re.Reason)
	}
	return &Error{File: p.file, Line: line, Field: join(path, re.Field), Reason: reason, Err: re}
}

// rule reads one rule and the line of each of its keys. The default rule
// takes no method or path_prefix: it covers whatever no rule does.
func (p *parser) rule(n *yaml.Node, path string, isDefault bool) (sluice.Rule, map[string]int, error) {
	var r sluice.Rule
	lines := map[string]int{}
	err := p.fields(n, path, func(key string, v *yaml.Node, field string) (bool, error) {
		lines[key] = v.Line
		var err error
		switch key {
		case "name":
			r.Name, err = p.str(v, field)
		case "method", "path_prefix":
			if isDefault {
				return true, p.errAt(v.Line, field, "not allowed: the default covers every request no rule covers")
			}
			var s string
			s, err = p.str(v, field)
			if key == "method" {
				r.Method = s
			} else {
				r.PathPrefix = s
			}
		case "scope":
			var s string
			s, err = p.str(v, field)
			r.Scope = sluice.Scope(s)
		case "algorithm":
			r.Algorithm, err = p.str(v, field)
		case "limit":
			r.Limit, err = p.integer(v, field)
		case "window":
			r.Window, err = p.duration(v, field)
		case "burst":
			r.Burst, err = p.integer(v, field)
			if err == nil && r.Burst <= 0 {
				err = p.errAt(v.Line, field, "must be positive when given, got %d", r.Burst)
			}
		case "cost":
			r.Cost, err = p.integer(v, field)
			if err == nil && r.Cost <= 0 {
				err = p.errAt(v.Line, field, "must be positive when given, got %d", r.Cost)
			}
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return sluice.Rule{}, nil, err
	}
	if !isDefault && r.PathPrefix == "" {
		if _, given := lines["path_prefix"]; !given {
			return sluice.Rule{}, nil, p.errAt(n.Line, join(path, "path_prefix"), "required")
		}
	}
	for _, req := range []string{"name", "scope", "algorithm", "limit", "window"} {
		if _, given := lines[req]; !given {
			return sluice.Rule{}, nil, p.errAt(n.Line, join(path, req), "required")
		}
	}
	return r, lines, nil
}

func (p *parser) store(n *yaml.Node, path string, s *Store) error {
	var dirGiven bool
	err := p.fields(n, path, func(key string, v *yaml.Node, field string) (bool, error) {
		var err error
		switch key {
		case "backend":
			s.Backend, err = p.oneOf(v, field, BackendMemory, BackendPebble, BackendBolt)
		case "dir":
			s.Dir, err = p.str(v, field)
			dirGiven = true
			if err == nil && s.Dir == "" {
				err = p.errAt(v.Line, field, "must not be empty")
			}
		case "durability":
			var d string
			d, err = p.oneOf(v, field, engine.Interval.String(), engine.Sync.String())
			if err == nil {
				s.Durability, err = engine.ParseDurability(d)
			}
		case "flush_interval":
			s.FlushInterval, err = p.duration(v, field)
			if err == nil && s.FlushInterval <= 0 {
				err = p.errAt(v.Line, field, "must be positive, got %v", s.FlushInterval)
			}
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return err
	}
	if s.Backend != BackendMemory && !dirGiven {
		return p.errAt(n.Line, join(path, "dir"), "required for the %s backend", s.Backend)
	}
	return nil
}

func (p *parser) identity(n *yaml.Node, path string, id *identity.Config) error {
	header := func(v *yaml.Node, field string) (string, error) {
		s, err := p.str(v, field)
		if err != nil {
			return "", err
		}
		if !identity.ValidHeaderName(s) {
			return "", p.errAt(v.Line, field, "want an HTTP header name, got %q", s)
		}
		return s, nil
	}
	return p.fields(n, path, func(key string, v *yaml.Node, field string) (bool, error) {
		var err error
		switch key {
		case "user_header":
			id.UserHeader, err = header(v, field)
		case "api_key_header":
			id.APIKeyHeader, err = header(v, field)
		case "trusted_proxies":
			if v.Kind != yaml.SequenceNode {
				return true, p.notSupported(v, field, "a list of addresses or prefixes")
			}
			id.TrustedProxies = make([]netip.Prefix, 0, len(v.Content))
			for i, item := range v.Content {
				f := fmt.Sprintf("%s[%d]", field, i)
				s, err := p.str(item, f)
				if err != nil {
					return true, err
				}
				pfx, err := identity.ParseTrustedProxy(s)
				if err != nil {
					return true, p.errAt(item.Line, f, "%v", err)
				}
				id.TrustedProxies = append(id.TrustedProxies, pfx)
			}
		case "forwarding_header":
			var s string
			s, err = p.oneOf(v, field, string(identity.XForwardedFor), string(identity.Forwarded))
			id.ForwardingHeader = identity.ForwardingHeader(s)
		case "ipv6_prefix":
			var bits int64
			bits, err = p.integer(v, field)
			if err == nil && (bits < 1 || bits > 128) {
				err = p.errAt(v.Line, field, "want a prefix length from 1 to 128, got %d", bits)
			}
			id.IPv6Prefix = int(bits)
		case "headers_from_trusted_proxies_only":
			id.HeadersFromTrustedProxiesOnly, err = p.boolean(v, field)
		default:
			return false, nil
		}
		return true, err
	})
}
