package sluice

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

	"github.com/sluice-go/sluice/engine"
)

// The store backends a configuration may name.
const (
	BackendMemory = "memory"
	BackendPebble = "pebble"
	BackendBolt   = "bolt"
)

// Defaults a parsed Config holds for the keys a file leaves out.
const (
	DefaultBackend       = BackendMemory
	DefaultFlushInterval = engine.DefaultFlushInterval
	DefaultUserHeader    = "X-User-ID"
	DefaultAPIKeyHeader  = "X-API-Key"
	DefaultIPv6Prefix    = 64
)

// StoreErrorPolicy says what happens to a request when the store fails and
// no decision can be made.
type StoreErrorPolicy string

// The store error policies.
const (
	// FailOpen, the default, lets the request pass (the error is logged
	// and counted).
	FailOpen StoreErrorPolicy = "open"
	// FailClosed refuses the request with 503 Service Unavailable.
	FailClosed StoreErrorPolicy = "closed"
)

// Config is a gateway's configuration, as read from a YAML file by
// ParseConfig or LoadConfig, which fill in every default: a parsed Config
// holds the values in force, not blanks.
//
// The store section is read when the program starts; a reload applies the
// rest.
type Config struct {
	// Store is the "store" section.
	Store StoreConfig
	// Identity is the "identity" section.
	Identity IdentityConfig
	// OnStoreError is "on_store_error": FailOpen (default) or FailClosed.
	OnStoreError StoreErrorPolicy
	// Match is "match": MatchMostSpecific (default) or MatchAll.
	Match MatchMode
	// Rules is "rules", in file order.
	Rules []Rule
	// Default is "default", the rule for requests no rule covers, or nil.
	Default *Rule

	ruleset *Ruleset // compiled from the above by ParseConfig
}

// StoreConfig is where the limiter keeps its state.
type StoreConfig struct {
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

// IdentityConfig says how a request is turned into a caller identity.
type IdentityConfig struct {
	// UserHeader is "user_header", the header holding the user id;
	// DefaultUserHeader when left out.
	UserHeader string
	// APIKeyHeader is "api_key_header", the header holding the API key;
	// DefaultAPIKeyHeader when left out.
	APIKeyHeader string
	// TrustedProxies is "trusted_proxies": peers whose X-Forwarded-For and
	// Forwarded headers are believed. A bare address means that address
	// alone (/32 or /128); IPv4-mapped IPv6 is read as IPv4. Empty by
	// default: no forwarding header is believed.
	TrustedProxies []netip.Prefix
	// IPv6Prefix is "ipv6_prefix", the prefix length IPv6 callers are
	// grouped by (1 to 128); DefaultIPv6Prefix (64) when left out.
	IPv6Prefix int
	// HeadersFromTrustedProxiesOnly is
	// "headers_from_trusted_proxies_only" (an addition to the documented
	// shape): when true, the user and API key headers are believed only on
	// requests whose peer is a trusted proxy (the authenticating layer in
	// front), and ignored otherwise. False by default.
	HeadersFromTrustedProxiesOnly bool
}

// ConfigError reports a configuration that does not parse or validate, with
// the place and the key at fault. It matches ErrInvalidConfig and unwraps to
// the cause (a *RuleError for an invalid rule).
type ConfigError struct {
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

func (e *ConfigError) Error() string {
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
func (e *ConfigError) Unwrap() error { return e.Err }

// Is reports whether target is ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Ruleset returns the configuration's rules, default and match mode
// compiled. For a Config from ParseConfig it is the ruleset validated
// there; for one built by hand it is compiled now.
func (c *Config) Ruleset() (*Ruleset, error) {
	if c.ruleset != nil {
		return c.ruleset, nil
	}
	return NewRuleset(c.Rules, c.Default, c.Match)
}

// LoadConfig reads and parses the configuration file at path. See
// ParseConfig.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseConfig(path, data)
}

// ParseConfig parses a YAML configuration; name is what errors call the
// file. Every key is checked: an unknown key, a value of the wrong type, a
// duration that time.ParseDuration refuses ("1 minute") and an invalid rule
// are *ConfigError values naming the line and the key, such as
//
//	config.yaml:12: rules[1].window: want a duration such as 1m or 500ms, got "1 minute"
//
// An empty document is an error too, so that a file caught half-written
// during a reload is rejected rather than read as "no limits". Anchors and
// aliases are not supported. The result holds every default filled in.
func ParseConfig(name string, data []byte) (*Config, error) {
	p := parser{file: name}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, p.errAt(0, "", "the configuration is empty")
		}
		return nil, p.yamlError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, p.yamlError(err)
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
		Store:        StoreConfig{Backend: DefaultBackend, Durability: engine.Interval, FlushInterval: DefaultFlushInterval},
		Identity:     IdentityConfig{UserHeader: DefaultUserHeader, APIKeyHeader: DefaultAPIKeyHeader, IPv6Prefix: DefaultIPv6Prefix},
		OnStoreError: FailOpen,
		Match:        MatchMostSpecific,
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

func (p *parser) errAt(line int, field, format string, args ...any) *ConfigError {
	return &ConfigError{File: p.file, Line: line, Field: field, Reason: fmt.Sprintf(format, args...)}
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError turns a YAML syntax error into a *ConfigError with its line.
func (p *parser) yamlError(err error) *ConfigError {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &ConfigError{File: p.file, Line: line, Reason: m[2], Err: err}
	}
	return &ConfigError{File: p.file, Reason: strings.TrimPrefix(msg, "yaml: "), Err: err}
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

func (p *parser) notSupported(n *yaml.Node, field, want string) *ConfigError {
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
			s, err = p.oneOf(v, field, string(FailOpen), string(FailClosed))
			c.OnStoreError = StoreErrorPolicy(s)
		case "match":
			var s string
			s, err = p.oneOf(v, field, string(MatchMostSpecific), string(MatchAll))
			c.Match = MatchMode(s)
		case "rules":
			if v.Kind != yaml.SequenceNode {
				return true, p.notSupported(v, field, "a list of rules")
			}
			c.Rules = make([]Rule, 0, len(v.Content))
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
	rs, i, err := compileRuleset(c.Rules, c.Default, c.Match)
	if err != nil {
		return p.ruleError(err, i)
	}
	c.ruleset = rs
	return nil
}

// ruleError places an error from compileRuleset on the line of the field at
// fault in rule i (-1: the default).
func (p *parser) ruleError(err error, i int) error {
	var re *RuleError
	if !errors.As(err, &re) {
		return &ConfigError{File: p.file, Reason: err.Error(), Err: err}
	}
	node, lines, path := p.defNode, p.defLines, "default"
	if i >= 0 {
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
	return &ConfigError{File: p.file, Line: line, Field: join(path, re.Field), Reason: reason, Err: re}
}

// rule reads one rule and the line of each of its keys. The default rule
// takes no method or path_prefix: it covers whatever no rule does.
func (p *parser) rule(n *yaml.Node, path string, isDefault bool) (Rule, map[string]int, error) {
	var r Rule
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
			r.Scope = Scope(s)
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
		return Rule{}, nil, err
	}
	if !isDefault && r.PathPrefix == "" {
		if _, given := lines["path_prefix"]; !given {
			return Rule{}, nil, p.errAt(n.Line, join(path, "path_prefix"), "required")
		}
	}
	for _, req := range []string{"name", "scope", "algorithm", "limit", "window"} {
		if _, given := lines[req]; !given {
			return Rule{}, nil, p.errAt(n.Line, join(path, req), "required")
		}
	}
	return r, lines, nil
}

func (p *parser) store(n *yaml.Node, path string, s *StoreConfig) error {
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

func (p *parser) identity(n *yaml.Node, path string, id *IdentityConfig) error {
	header := func(v *yaml.Node, field string) (string, error) {
		s, err := p.str(v, field)
		if err != nil {
			return "", err
		}
		if !isHeaderName(s) {
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
				pfx, err := ParseTrustedProxy(s)
				if err != nil {
					return true, p.errAt(item.Line, f, "%v", err)
				}
				id.TrustedProxies = append(id.TrustedProxies, pfx)
			}
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

// ParseTrustedProxy parses an address ("10.0.0.1", meaning /32 or /128)
// or a prefix ("10.0.0.0/8") of trusted proxies. The prefix is masked, and
// IPv4-mapped IPv6 is read as IPv4.
func ParseTrustedProxy(s string) (netip.Prefix, error) {
	var pfx netip.Prefix
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("want an address or a prefix such as 10.0.0.0/8, got %q", s)
		}
		pfx = p
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("want an address or a prefix such as 10.0.0.0/8, got %q", s)
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	if a := pfx.Addr(); a.Is4In6() {
		if pfx.Bits() < 96 {
			return netip.Prefix{}, fmt.Errorf("an IPv4-mapped prefix must be /96 or longer, got %q", s)
		}
		pfx = netip.PrefixFrom(a.Unmap(), pfx.Bits()-96)
	}
	return pfx.Masked(), nil
}

// isHeaderName reports whether s is a valid HTTP header field name.
func isHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return s != ""
}
