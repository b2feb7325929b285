package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/internal/configerr"
	"github.com/sluice-go/sluice/internal/yamlnode"
)

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
//
// Parse reads nothing but data: no file and no environment variable, so
// that what it returns depends on data and name alone. The values a file
// names rather than holds (store.redis.password_file and password_env,
// store.redis.tls.ca_file) are read by ReadReferences, which Load calls;
// paths are made relative to name's directory here.
func Parse(name string, data []byte) (*Config, error) {
	p := parser{Reader: yamlnode.Reader{File: name}}
	root, err := p.document(data)
	if err != nil {
		return nil, err
	}
	c := &Config{
		Server: Server{IdleTimeout: DefaultIdleTimeout, ClientBodyTimeout: DefaultClientBodyTimeout,
			ClientBodyMinRate: DefaultClientBodyMinRate, ClientBodyRateGrace: DefaultClientBodyRateGrace,
			SendTimeout: DefaultSendTimeout, MaxConnections: DefaultMaxConnections, ThrottledPerRule: DefaultThrottledPerRule},
		Store:        defaultStore(),
		Identity:     identity.Config{}.WithDefaults(),
		OnStoreError: sluice.FailOpen,
		Match:        sluice.MatchMostSpecific,
		PathCase:     sluice.PathCaseSensitive,
		ForwardPath:  ForwardCanonical,
	}
	if err := p.config(root, c); err != nil {
		return nil, err
	}
	c.Store.refs = p.refs
	return c, nil
}

// defaultStore is the store section left out: memory, with every default.
func defaultStore() Store {
	return Store{Backend: DefaultBackend, Durability: engine.Interval, FlushInterval: DefaultFlushInterval,
		Redis: Redis{Timeout: DefaultRedisTimeout, KeyPrefix: DefaultRedisKeyPrefix, FleetSize: DefaultFleetSize}}
}

// parseStore parses only the store section of a configuration, as
// LoadStore reads it: the other sections of a gateway's file are left
// unread, and a file without a store section is an error.
func parseStore(name string, data []byte) (Store, error) {
	p := parser{Reader: yamlnode.Reader{File: name}}
	root, err := p.document(data)
	if err != nil {
		return Store{}, err
	}
	s, found := defaultStore(), false
	err = p.Fields(root, "", func(key string, v *yaml.Node, field string) (bool, error) {
		switch key {
		case "store":
			found = true
			return true, p.store(v, field, &s)
		case "identity", "on_store_error", "match", "path_case", "forward_path", "rules", "default", "overrides", "server":
			return true, nil // a gateway's, not the store's
		}
		return false, nil
	})
	if err != nil {
		return Store{}, err
	}
	if !found {
		return Store{}, p.Errorf(root.Line, "store", "the file has no store section")
	}
	s.refs = p.refs
	return s, nil
}

// document reads the one YAML document data holds and returns its root;
// an empty document is an error.
func (p *parser) document(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, p.Errorf(0, "", "the configuration is empty")
		}
		return nil, p.SyntaxError(err, data)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, p.SyntaxError(err, data)
		}
		return nil, p.Errorf(extra.Line, "", "want one YAML document, found another")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, p.Errorf(0, "", "the configuration is empty")
		}
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, p.Errorf(root.Line, "", "the configuration is empty")
	}
	return root, nil
}

// parser walks a configuration's YAML node tree.
type parser struct {
	yamlnode.Reader
	ruleNodes []*yaml.Node // the mapping of each rule, by index
	defNode   *yaml.Node   // the default's mapping
	ruleLines []map[string]int
	defLines  map[string]int

	overrideNodes []overrideNode // the overrides section, read (overrides.go)
	exemptLines   []int          // the line of each exempt entry
	refs          []reference    // what the store section names, for ReadReferences
}

// refer notes a value the file names, to be read by ReadReferences.
func (p *parser) refer(kind referenceKind, name string, line int, field string) {
	p.refs = append(p.refs, reference{kind: kind, name: name, file: p.File, line: line, field: field})
}

// response reads the response section.
func (p *parser) response(n *yaml.Node, path string, r *Response) error {
	return p.Fields(n, path, func(key string, v *yaml.Node, field string) (bool, error) {
		var err error
		switch key {
		case "deny_status":
			var code int64
			if code, err = p.Int(v, field); err == nil && (code < 400 || code > 599) {
				err = p.Errorf(v.Line, field, "want a client or server error status, 400 to 599, got %d", code)
			}
			r.DenyStatus = int(code)
		case "body":
			var b string
			b, err = p.OneOf(v, field, "text", "problem")
			r.Problem = b == "problem"
		case "reset":
			var b string
			b, err = p.OneOf(v, field, "seconds", "unix")
			r.ResetUnix = b == "unix"
		default:
			return false, nil
		}
		return true, err
	})
}

// The bounds of the server section, which serve's flags over it share.
const (
	// MinServerTimeout and MaxServerTimeout bound the server section's
	// timeouts: a day is longer than any client should be waited for, and
	// less than a millisecond would cut every client.
	MinServerTimeout = time.Millisecond
	MaxServerTimeout = 24 * time.Hour
	// MaxClientBodyMinRate bounds client_body_min_rate, in bytes a second.
	MaxClientBodyMinRate = 1 << 30
	// MaxConnectionsCap bounds max_connections.
	MaxConnectionsCap = 1 << 20
)

// server reads the server section.
func (p *parser) server(n *yaml.Node, path string, sv *Server) error {
	return p.Fields(n, path, func(key string, v *yaml.Node, field string) (bool, error) {
		var err error
		timeout := func(d *time.Duration) {
			if *d, err = p.Duration(v, field); err == nil && (*d < MinServerTimeout || *d > MaxServerTimeout) {
				err = p.Errorf(v.Line, field, "want a duration from 1ms to 24h, got %v", *d)
			}
		}
		switch key {
		case "idle_timeout":
			timeout(&sv.IdleTimeout)
		case "client_body_timeout":
			timeout(&sv.ClientBodyTimeout)
		case "send_timeout":
			timeout(&sv.SendTimeout)
		case "client_body_rate_grace":
			timeout(&sv.ClientBodyRateGrace)
		case "client_body_min_rate":
			if sv.ClientBodyMinRate, err = p.Int(v, field); err == nil && (sv.ClientBodyMinRate < 0 || sv.ClientBodyMinRate > MaxClientBodyMinRate) {
				err = p.Errorf(v.Line, field, "want 0 (off) to 1073741824 bytes a second, got %d", sv.ClientBodyMinRate)
			}
		case "max_connections":
			var m int64
			if m, err = p.Int(v, field); err == nil && (m < 1 || m > MaxConnectionsCap) {
				err = p.Errorf(v.Line, field, "want 1 to 1048576 connections, got %d", m)
			}
			sv.MaxConnections = int(m)
		case "admin_hosts":
			if v.Kind != yaml.SequenceNode {
				return true, p.Want(v, field, "a list of host names, such as [sluice-admin.internal]")
			}
			sv.AdminHosts = sv.AdminHosts[:0]
			for i, item := range v.Content {
				f := fmt.Sprintf("%s[%d]", field, i)
				h, err := p.Str(item, f)
				if err != nil {
					return true, err
				}
				if h == "" || len(h) > 253 || strings.ContainsAny(h, ":/ \t[]@,") {
					return true, p.Errorf(item.Line, f, "want a host name such as sluice-admin.internal, without port or scheme")
				}
				sv.AdminHosts = append(sv.AdminHosts, h)
			}
		case "listen":
			sv.Listen, err = p.address(v, field)
		case "admin":
			sv.Admin, err = p.address(v, field)
		case "usage_listen":
			sv.UsageListen, err = p.address(v, field)
		case "admin_token_file":
			sv.AdminTokenFile, err = p.path(v, field)
		case "tls_cert":
			sv.TLSCert, err = p.path(v, field)
		case "tls_key":
			sv.TLSKey, err = p.path(v, field)
		case "tls_client_ca":
			sv.TLSClientCA, err = p.path(v, field)
		case "upstream":
			sv.Upstream, err = p.Str(v, field)
			if u, uerr := url.Parse(sv.Upstream); err == nil && (uerr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
				err = p.Errorf(v.Line, field, "want an http or https URL such as http://127.0.0.1:8081, got %s", configerr.Quote(sv.Upstream))
			}
		case "throttled_per_rule":
			var n int64
			if n, err = p.Int(v, field); err == nil && (n < 0 || n > MaxThrottledPerRule) {
				err = p.Errorf(v.Line, field, "want 0 (off) to %d callers, got %d", MaxThrottledPerRule, n)
			}
			sv.ThrottledPerRule = int(n)
		default:
			return false, nil
		}
		return true, err
	})
}

// address reads a listener's address: host:port, or :port for every
// address.
func (p *parser) address(n *yaml.Node, field string) (string, error) {
	s, err := p.Str(n, field)
	if err != nil {
		return "", err
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		return "", p.Errorf(n.Line, field, "want host:port, or :port for every address, got %s", configerr.Quote(s))
	}
	return s, nil
}

// path reads a file or directory path: one that is not absolute is
// relative to the configuration file's own directory, as the file reads,
// whatever the working directory of the process reading it.
func (p *parser) path(n *yaml.Node, field string) (string, error) {
	s, err := p.Str(n, field)
	if err != nil || s == "" || filepath.IsAbs(s) {
		return s, err
	}
	return filepath.Join(filepath.Dir(p.File), s), nil
}

func (p *parser) config(root *yaml.Node, c *Config) error {
	lines := map[string]int{}
	err := p.Fields(root, "", func(key string, v *yaml.Node, field string) (bool, error) {
		lines[key] = v.Line
		var err error
		switch key {
		case "store":
			err = p.store(v, field, &c.Store)
		case "identity":
			err = p.identity(v, field, &c.Identity)
		case "on_store_error":
			var s string
			s, err = p.OneOf(v, field, string(sluice.FailOpen), string(sluice.FailClosed), string(sluice.FailLocal))
			c.OnStoreError = sluice.StoreErrorPolicy(s)
		case "allow_empty":
			c.AllowEmpty, err = p.Bool(v, field)
		case "match":
			var s string
			s, err = p.OneOf(v, field, string(sluice.MatchMostSpecific), string(sluice.MatchAll))
			c.Match = sluice.MatchMode(s)
		case "path_case":
			var s string
			s, err = p.OneOf(v, field, string(sluice.PathCaseSensitive), string(sluice.PathCaseInsensitive))
			c.PathCase = sluice.PathCase(s)
		case "forward_path":
			var s string
			s, err = p.OneOf(v, field, string(ForwardCanonical), string(ForwardOriginal))
			c.ForwardPath = ForwardPath(s)
		case "rules":
			if v.Kind != yaml.SequenceNode {
				return true, p.Want(v, field, "a list of rules")
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
		case "overrides":
			err = p.overrides(v, field)
		case "response":
			err = p.response(v, field, &c.Response)
		case "server":
			err = p.server(v, field, &c.Server)
		case "exempt":
			if v.Kind != yaml.SequenceNode {
				return true, p.Want(v, field, "a list of callers, such as [user:ops, ip:10.0.0.0/8]")
			}
			for i, item := range v.Content {
				f := fmt.Sprintf("%s[%d]", field, i)
				e, err := p.Str(item, f)
				if err != nil {
					return true, err
				}
				c.Exempt = append(c.Exempt, e)
				p.exemptLines = append(p.exemptLines, item.Line)
			}
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return err
	}
	rs, err := sluice.NewRulesetWith(c.Rules, c.Default, c.rulesetOptions())
	if err != nil {
		return p.ruleError(err)
	}
	if rs, err = p.applyOverrides(rs, c); err != nil {
		return err
	}
	c.ruleset = rs
	if len(c.Exempt) > 0 {
		id, err := identity.New(c.Identity)
		if err == nil {
			for i, e := range c.Exempt {
				one := Config{Exempt: []string{e}}
				if _, err := one.ExemptFunc(id); err != nil {
					return p.Errorf(p.exemptLines[i], fmt.Sprintf("exempt[%d]", i), "%v", strings.TrimPrefix(err.Error(), "exempt: "))
				}
			}
		}
	}
	if c.AllowEmpty {
		if r := c.enforcing(); r != nil {
			return p.Errorf(lines["allow_empty"], "allow_empty",
				"true says this file limits nothing on purpose, but rule %q limits: remove allow_empty or the rules", r.Name)
		}
	} else if len(c.Rules) == 0 && c.Default == nil {
		c.Warnings = append(c.Warnings, p.Errorf(lines["rules"], "rules", "no rule and no default: this configuration limits nothing").Error())
	}
	if c.OnStoreError == sluice.FailLocal && c.Store.Backend != BackendRedis {
		c.Warnings = append(c.Warnings, p.Errorf(lines["on_store_error"], "on_store_error",
			"local decides in memory while a shared store is down, but the store is %s, in the gateway's own process: it never applies (open or closed say what a failing %s store does)", c.Store.Backend, c.Store.Backend).Error())
	}
	return nil
}

// ruleError places an error from sluice.NewRuleset on the line of the
// field at fault in the rule at fault.
func (p *parser) ruleError(err error) error {
	var re *sluice.RuleError
	if !errors.As(err, &re) {
		return &Error{File: p.File, Reason: err.Error(), Err: err}
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
		reason = fmt.Sprintf("rule %s: %s", configerr.Quote(re.Rule), re.Reason)
	}
	return &Error{File: p.File, Line: line, Field: configerr.Join(path, re.Field), Reason: reason, Err: re}
}

// rule reads one rule and the line of each of its keys. The default rule
// takes no method or path_prefix: it covers whatever no rule does.
func (p *parser) rule(n *yaml.Node, path string, isDefault bool) (sluice.Rule, map[string]int, error) {
	var r sluice.Rule
	lines := map[string]int{}
	err := p.Fields(n, path, func(key string, v *yaml.Node, field string) (bool, error) {
		lines[key] = v.Line
		var err error
		switch key {
		case "name":
			r.Name, err = p.Str(v, field)
		case "method", "path_prefix", "path", "host":
			if isDefault {
				return true, p.Errorf(v.Line, field, "not allowed: the default covers every request no rule covers")
			}
			var s string
			s, err = p.Str(v, field)
			switch key {
			case "method":
				r.Method = s
			case "path_prefix":
				r.PathPrefix = s
			case "path":
				r.Path = s
			default:
				r.Host = s
			}
		case "scope":
			var s string
			s, err = p.Str(v, field)
			r.Scope = sluice.Scope(s)
		case "algorithm":
			var s string
			s, err = p.Str(v, field)
			r.Algorithm = algo.Name(s)
		case "limit":
			r.Limit, err = p.Int(v, field)
		case "window":
			r.Window, err = p.Duration(v, field)
		case "max_hold":
			r.MaxHold, err = p.Duration(v, field)
			if err == nil && r.MaxHold <= 0 {
				err = p.Errorf(v.Line, field, "must be positive, got %v", r.MaxHold)
			}
		case "retry_after":
			r.RetryAfter, err = p.Duration(v, field)
			if err == nil && r.RetryAfter <= 0 {
				err = p.Errorf(v.Line, field, "must be positive when given, got %v", r.RetryAfter)
			}
		case "burst":
			r.Burst, err = p.Int(v, field)
			if err == nil && r.Burst <= 0 {
				err = p.Errorf(v.Line, field, "must be positive when given, got %d", r.Burst)
			}
		case "cost":
			r.Cost, err = p.Int(v, field)
			if err == nil && r.Cost <= 0 {
				err = p.Errorf(v.Line, field, "must be positive when given, got %d", r.Cost)
			}
		case "calendar":
			r.Calendar, err = p.Str(v, field)
		case "timezone":
			r.Timezone, err = p.Str(v, field)
		case "anchor":
			r.Anchor, err = p.Str(v, field)
		case "shadow":
			r.Shadow, err = p.Bool(v, field)
		case "settle":
			r.Settle, err = p.settle(v, field, lines)
		case "counter":
			r.Counter, err = p.Str(v, field)
			if err == nil && r.Counter == "" {
				err = p.Errorf(v.Line, field, "must not be empty (leave it out for the rule's own counter)")
			}
		case "group":
			r.Group, err = p.Str(v, field)
			if err == nil && r.Group == "" {
				err = p.Errorf(v.Line, field, "must not be empty (leave it out for a rule outside groups)")
			}
		case "plan":
			r.Plan, err = p.Str(v, field)
			if err == nil && r.Plan == "" {
				err = p.Errorf(v.Line, field, "must not be empty (leave it out for a rule of every caller)")
			}
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return sluice.Rule{}, nil, err
	}
	// A missing field is named with the rule, as the rule's other errors
	// are, once the rule has a name.
	required := "required"
	if r.Name != "" {
		required = fmt.Sprintf("rule %s: required", configerr.Quote(r.Name))
	}
	if !isDefault && r.PathPrefix == "" {
		_, prefixGiven := lines["path_prefix"]
		if _, pathGiven := lines["path"]; !prefixGiven && !pathGiven {
			return sluice.Rule{}, nil, p.Errorf(n.Line, configerr.Join(path, "path_prefix"), "%s (or path, a pattern such as /v1/orgs/{org}/orders)", required)
		}
	}
	period := "window"
	if r.Algorithm == algo.ConcurrencyName {
		period = "max_hold" // the longest a request holds its slot
	}
	if _, given := lines["calendar"]; given {
		period = "calendar" // whose windows vary in length
	}
	for _, req := range []string{"name", "scope", "algorithm", "limit", period} {
		if _, given := lines[req]; !given {
			return sluice.Rule{}, nil, p.Errorf(n.Line, configerr.Join(path, req), "%s", required)
		}
	}
	return r, lines, nil
}

// settle reads a rule's settle section (sluice.Settle), noting the line
// of each of its keys in lines as "settle.key".
func (p *parser) settle(n *yaml.Node, path string, lines map[string]int) (*sluice.Settle, error) {
	s := &sluice.Settle{}
	err := p.Fields(n, path, func(key string, v *yaml.Node, field string) (bool, error) {
		lines["settle."+key] = v.Line
		var err error
		switch key {
		case "estimate_field":
			s.EstimateField, err = p.Str(v, field)
		case "estimate_add":
			s.EstimateAdd, err = p.Int(v, field)
		case "max_body":
			s.MaxBody, err = p.Int(v, field)
			if err == nil && s.MaxBody <= 0 {
				err = p.Errorf(v.Line, field, "must be positive when given, got %d", s.MaxBody)
			}
		case "actual_header":
			s.ActualHeader, err = p.Str(v, field)
		case "actual_trailer":
			s.ActualTrailer, err = p.Str(v, field)
		case "actual_field":
			s.ActualField, err = p.Str(v, field)
		default:
			return false, nil
		}
		return true, err
	})
	return s, err
}

func (p *parser) store(n *yaml.Node, path string, s *Store) error {
	var dirGiven bool
	lines := map[string]int{}
	err := p.Fields(n, path, func(key string, v *yaml.Node, field string) (bool, error) {
		lines[key] = v.Line
		var err error
		switch key {
		case "backend":
			s.Backend, err = p.OneOf(v, field, Backends...)
		case "redis":
			err = p.redis(v, field, &s.Redis)
		case "dir":
			s.Dir, err = p.path(v, field)
			dirGiven = true
			if err == nil && s.Dir == "" {
				err = p.Errorf(v.Line, field, "must not be empty")
			}
		case "durability":
			var d string
			d, err = p.OneOf(v, field, engine.Interval.String(), engine.Sync.String())
			if err == nil {
				s.Durability, err = engine.ParseDurability(d)
			}
		case "flush_interval":
			s.FlushInterval, err = p.Duration(v, field)
			if err == nil && s.FlushInterval <= 0 {
				err = p.Errorf(v.Line, field, "must be positive, got %v", s.FlushInterval)
			}
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return err
	}
	if s.Backend == BackendRedis {
		for _, key := range []string{"dir", "durability", "flush_interval"} {
			if line, given := lines[key]; given {
				return p.Errorf(line, configerr.Join(path, key), "not used by the redis backend (it applies to pebble and bolt)")
			}
		}
		if len(s.Redis.Addrs) == 0 {
			return p.Errorf(n.Line, configerr.Join(path, "redis.addrs"), "required for the redis backend: one host:port, or several for a Cluster")
		}
		return nil
	}
	if line, given := lines["redis"]; given {
		return p.Errorf(line, configerr.Join(path, "redis"), "only for the redis backend, but store.backend is %s (set backend: redis)", s.Backend)
	}
	if s.Backend != BackendMemory && !dirGiven {
		return p.Errorf(n.Line, configerr.Join(path, "dir"), "required for the %s backend", s.Backend)
	}
	return nil
}

// redis reads the store's redis section.
func (p *parser) redis(n *yaml.Node, path string, r *Redis) error {
	var secret []string // the password keys given
	lines := map[string]int{}
	err := p.Fields(n, path, func(key string, v *yaml.Node, field string) (bool, error) {
		lines[key] = v.Line
		if key == "password" || key == "password_file" || key == "password_env" {
			secret = append(secret, key)
			if len(secret) > 1 {
				return true, p.Errorf(v.Line, field, "give one of password, password_file and password_env, not %s and %s", secret[0], secret[1])
			}
		}
		var err error
		switch key {
		case "addrs":
			if v.Kind == yaml.ScalarNode && v.Tag == "!!str" {
				return true, p.Errorf(v.Line, field, "want a list of host:port, such as [%s]", configerr.Clip(v.Value))
			}
			if v.Kind != yaml.SequenceNode {
				return true, p.Want(v, field, "a list of host:port")
			}
			r.Addrs = make([]string, 0, len(v.Content))
			for i, item := range v.Content {
				f := fmt.Sprintf("%s[%d]", field, i)
				a, err := p.Str(item, f)
				if err != nil {
					return true, err
				}
				if reason := checkAddr(a); reason != "" {
					return true, p.Errorf(item.Line, f, "want host:port, such as 127.0.0.1:6379, got %s: %s", configerr.Quote(a), reason)
				}
				for j, prev := range r.Addrs {
					if prev == a {
						return true, p.Errorf(item.Line, f, "%s is %s[%d] already", a, field, j)
					}
				}
				r.Addrs = append(r.Addrs, a)
			}
			if len(r.Addrs) == 0 {
				err = p.Errorf(v.Line, field, "must list at least one host:port")
			}
		case "master_name":
			r.MasterName, err = p.Str(v, field)
			if err == nil && r.MasterName == "" {
				err = p.Errorf(v.Line, field, "must not be empty (leave it out for no Sentinel)")
			}
		case "username":
			r.Username, err = p.Str(v, field)
		case "password":
			r.Password, err = p.Str(v, field)
		case "password_file":
			var file string
			if file, err = p.path(v, field); err == nil {
				p.refer(passwordFile, file, v.Line, field)
			}
		case "password_env":
			var name string
			if name, err = p.Str(v, field); err == nil {
				p.refer(passwordEnv, name, v.Line, field)
			}
		case "db":
			var db int64
			db, err = p.Int(v, field)
			if err == nil && (db < 0 || db > 1<<20) {
				err = p.Errorf(v.Line, field, "want a database number from 0, got %d", db)
			}
			r.DB = int(db)
		case "tls":
			err = p.redisTLS(v, field, &r.TLS)
		case "timeout":
			r.Timeout, err = p.Duration(v, field)
			if err == nil && r.Timeout <= 0 {
				err = p.Errorf(v.Line, field, "must be positive, got %v", r.Timeout)
			}
		case "key_prefix":
			r.KeyPrefix, err = p.Str(v, field)
			if err == nil && r.KeyPrefix == "" {
				err = p.Errorf(v.Line, field, "must not be empty (leave it out for %q)", DefaultRedisKeyPrefix)
			}
		case "fleet_size":
			var size int64
			size, err = p.Int(v, field)
			if err == nil && (size < 1 || size > 1<<20) {
				err = p.Errorf(v.Line, field, "want the number of gateways sharing the store, 1 or more, got %d", size)
			}
			r.FleetSize = int(size)
		case "auto_pipeline":
			r.AutoPipeline, err = p.Bool(v, field)
		case "breaker":
			err = p.breaker(v, field, &r.Breaker)
		default:
			return false, nil
		}
		return true, err
	})
	if err != nil {
		return err
	}
	if r.DB != 0 && len(r.Addrs) > 1 && r.MasterName == "" {
		return p.Errorf(lines["db"], configerr.Join(path, "db"), "a Cluster (several addrs) has database 0 only, got %d", r.DB)
	}
	return nil
}

// breaker reads the redis section's breaker: off (or false), on (or
// true), or a mapping of window, min_calls and failure_rate.
func (p *parser) breaker(n *yaml.Node, path string, b *RedisBreaker) error {
	if n.Kind == yaml.ScalarNode {
		switch {
		case n.Tag == "!!bool" && strings.EqualFold(n.Value, "false"), n.Tag == "!!str" && n.Value == "off":
			*b = RedisBreaker{Off: true}
			return nil
		case n.Tag == "!!bool" && strings.EqualFold(n.Value, "true"), n.Tag == "!!str" && n.Value == "on":
			*b = RedisBreaker{}
			return nil
		}
		return p.Errorf(n.Line, path, "want off, on, or a mapping of window, min_calls and failure_rate, got %s", yamlnode.Describe(n))
	}
	return p.Fields(n, path, func(key string, v *yaml.Node, field string) (bool, error) {
		var (
			err    error
			reason string
		)
		switch key {
		case "window":
			if b.Window, err = p.Duration(v, field); err == nil {
				reason = checkBreakerWindow(b.Window)
			}
		case "min_calls":
			var n int64
			if n, err = p.Int(v, field); err == nil {
				b.MinCalls, reason = int(n), checkBreakerMinCalls(n)
			}
		case "failure_rate":
			var r float64
			if err = v.Decode(&r); err != nil || v.Kind != yaml.ScalarNode {
				return true, p.Want(v, field, "a number such as 0.5")
			}
			b.FailureRate, reason = r, checkBreakerRate(r)
		default:
			return false, nil
		}
		if err == nil && reason != "" {
			err = p.Errorf(v.Line, field, "%s", reason)
		}
		return true, err
	})
}

// checkAddr says what is wrong with a Redis address, or "".
func checkAddr(a string) string {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return strings.TrimPrefix(err.Error(), "address "+a+": ")
	}
	if host == "" {
		return "no host"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "the port must be a number from 1 to 65535"
	}
	return ""
}

// redisTLS reads the redis section's tls: a boolean or a mapping.
func (p *parser) redisTLS(n *yaml.Node, path string, t *RedisTLS) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		var err error
		t.Enabled, err = p.Bool(n, path)
		return err
	}
	if n.Kind != yaml.MappingNode {
		return p.Want(n, path, "true, false or a mapping of ca_file, server_name and insecure_skip_verify")
	}
	t.Enabled = true
	return p.Fields(n, path, func(key string, v *yaml.Node, field string) (bool, error) {
		var err error
		switch key {
		case "ca_file":
			if t.CAFile, err = p.path(v, field); err == nil {
				p.refer(caFile, t.CAFile, v.Line, field)
			}
		case "server_name":
			t.ServerName, err = p.Str(v, field)
		case "insecure_skip_verify":
			t.InsecureSkipVerify, err = p.Bool(v, field)
		default:
			return false, nil
		}
		return true, err
	})
}

// maxProxyText bounds a trusted proxy as written: the longest address
// with a prefix length ("ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255/128")
// is 49 bytes. A longer one is refused without being parsed, and quoted in
// part.
const maxProxyText = 64

func (p *parser) identity(n *yaml.Node, path string, id *identity.Config) error {
	header := func(v *yaml.Node, field string) (string, error) {
		s, err := p.Str(v, field)
		if err != nil {
			return "", err
		}
		if !identity.ValidHeaderName(s) {
			return "", p.Errorf(v.Line, field, "want an HTTP header name, got %s", configerr.Quote(s))
		}
		return s, nil
	}
	return p.Fields(n, path, func(key string, v *yaml.Node, field string) (bool, error) {
		var err error
		switch key {
		case "user_header":
			id.UserHeader, err = header(v, field)
		case "api_key_header":
			id.APIKeyHeader, err = header(v, field)
		case "trusted_proxies":
			if v.Kind != yaml.SequenceNode {
				return true, p.Want(v, field, "a list of addresses or prefixes")
			}
			id.TrustedProxies = make([]netip.Prefix, 0, len(v.Content))
			for i, item := range v.Content {
				f := fmt.Sprintf("%s[%d]", field, i)
				s, err := p.Str(item, f)
				if err != nil {
					return true, err
				}
				if len(s) > maxProxyText {
					return true, p.Errorf(item.Line, f, "want an address or a prefix such as 10.0.0.0/8, got %s", configerr.Quote(s))
				}
				pfx, err := identity.ParseTrustedProxy(s)
				if err != nil {
					return true, p.Errorf(item.Line, f, "%v", err)
				}
				if pfx.Bits() == 0 {
					return true, p.Errorf(item.Line, f, "%s trusts every peer as a proxy: any client could choose its own key by sending %s; list your proxies' addresses or prefixes", s, "X-Forwarded-For")
				}
				id.TrustedProxies = append(id.TrustedProxies, pfx)
			}
		case "forwarding_header":
			var s string
			s, err = p.OneOf(v, field, string(identity.XForwardedFor), string(identity.Forwarded))
			id.ForwardingHeader = identity.ForwardingHeader(s)
		case "ipv6_prefix":
			var bits int64
			bits, err = p.Int(v, field)
			if err == nil && (bits < 1 || bits > 128) {
				err = p.Errorf(v.Line, field, "want a prefix length from 1 to 128, got %d", bits)
			}
			id.IPv6Prefix = int(bits)
		case "headers_from_trusted_proxies_only":
			id.HeadersFromTrustedProxiesOnly, err = p.Bool(v, field)
		case "plan_header":
			id.PlanHeader, err = header(v, field)
		default:
			return false, nil
		}
		return true, err
	})
}
