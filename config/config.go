package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/internal/configerr"
	"github.com/sluice-go/sluice/internal/yamlnode"
)

// The store backends a configuration may name.
const (
	BackendMemory = "memory"
	BackendPebble = "pebble"
	BackendBolt   = "bolt"
	BackendRedis  = "redis"
)

// Backends lists the store backends a configuration may name.
var Backends = []string{BackendMemory, BackendPebble, BackendBolt, BackendRedis}

// Defaults a parsed Config holds for the store keys a file leaves out. The
// identity section's are package identity's (identity.Config.WithDefaults).
// The Redis ones are package backend/redis' own defaults.
const (
	DefaultBackend        = BackendMemory
	DefaultFlushInterval  = engine.DefaultFlushInterval
	DefaultRedisTimeout   = 50 * time.Millisecond
	DefaultRedisKeyPrefix = "sluice:"
	DefaultFleetSize      = 1
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
	// OnStoreError is "on_store_error": sluice.FailOpen (default),
	// sluice.FailClosed or sluice.FailLocal (decide in-process on each
	// rule's share, the limit divided by Store.Redis.FleetSize: see
	// sluice.Local).
	OnStoreError sluice.StoreErrorPolicy
	// Match is "match": sluice.MatchMostSpecific (default) or
	// sluice.MatchAll.
	Match sluice.MatchMode
	// Rules is "rules", in file order. A rule's keys are its fields' names
	// in snake case (name, method, path_prefix, scope, algorithm, limit,
	// window, burst, cost, shadow); "shadow: true" sets Rule.Shadow.
	Rules []sluice.Rule
	// Default is "default", the rule for requests no rule covers, or nil.
	Default *sluice.Rule
	// Overrides is "overrides": callers given their own limit on a rule,
	// their keys as the doors build them (see overrides.go).
	Overrides []sluice.Override
	// Response is the "response" section: how a denial is answered.
	Response Response
	// Exempt is "exempt": the callers no rule limits, each written as
	// overrides' callers are (user:ID, key:API_KEY, keyhash:HEX,
	// ip:ADDRESS), or ip: and a prefix (ip:10.0.0.0/8) for a network.
	// Exemptions reload with the file. See ExemptFunc.
	Exempt []string
	// Warnings are what the file says that is valid but most likely not
	// what was meant, each naming the file, the line, the field and the
	// risk (a file that limits nothing; on_store_error: local on a store
	// in the gateway's own process). A command should log them.
	Warnings []string

	ruleset *sluice.Ruleset // compiled from the above by Parse
}

// Response is the "response" section.
type Response struct {
	// DenyStatus is "deny_status", a denial's status: 429 when left out
	// (nginx's limit_req_status), any of 400 to 599.
	DenyStatus int
	// Problem is "body: problem": an RFC 9457 application/problem+json
	// body naming the rule, the limit and the retry; "text" (the default)
	// is one line of text.
	Problem bool
	// ResetUnix is "reset: unix": X-RateLimit-Reset as a Unix time, as
	// GitHub and ulule/limiter send it; "seconds" (the default) counts from
	// now.
	ResetUnix bool
}

// ExemptFunc returns the test of the callers Exempt names, their keys
// read as id reads them: a caller key (as a rule counts it) is exempt when
// an entry names it, or, an IP key, when it falls in an entry's prefix.
func (c *Config) ExemptFunc(id *identity.Identifier) (func(key string) bool, error) {
	if len(c.Exempt) == 0 {
		return nil, nil
	}
	keys := map[string]bool{}
	var nets []netip.Prefix
	for _, e := range c.Exempt {
		if v, ok := strings.CutPrefix(e, "ip:"); ok && strings.Contains(v, "/") {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return nil, fmt.Errorf("exempt %q: want ip: and an address or a prefix such as 10.0.0.0/8", e)
			}
			nets = append(nets, p.Masked())
			continue
		}
		k, err := id.ParseKey(e)
		if err != nil {
			return nil, fmt.Errorf("exempt: %w", err)
		}
		keys[k] = true
	}
	return func(key string) bool {
		if keys[key] {
			return true
		}
		v, ok := strings.CutPrefix(key, "ip:")
		if !ok || len(nets) == 0 {
			return false
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			p, perr := netip.ParsePrefix(v) // an IPv6 caller, by its prefix
			if perr != nil {
				return false
			}
			a = p.Addr()
		}
		for _, n := range nets {
			if n.Contains(a) {
				return true
			}
		}
		return false
	}, nil
}

// Store is the "store" section: where the limiter keeps its state.
//
// It holds a []string, so compare two with Equal; its String leaves the
// Redis password out.
type Store struct {
	// Backend is "backend": BackendMemory (default), BackendPebble,
	// BackendBolt or BackendRedis.
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
	// Redis is the "redis" section, for the redis backend only (a redis
	// section under another backend is an error). Its defaults are
	// filled in whatever the backend.
	Redis Redis
}

// Redis is the store section's "redis" section: the Redis server (or
// Cluster) a fleet of gateways shares, so that a caller's budget is one
// across the fleet.
type Redis struct {
	// Addrs is "addrs", a list of host:port: one address is a standalone
	// server, several the seed nodes of a Cluster; with MasterName, the
	// Sentinels. Required.
	Addrs []string
	// MasterName is "master_name", the name of the primary the Sentinels
	// at Addrs watch: the store follows it across failovers. Empty for no
	// Sentinel.
	MasterName string
	// Username is "username", for Redis ACLs; empty for the default user.
	Username string
	// Password is the password: "password" itself, or read from the file
	// "password_file" names (one line; the newline is not part of it), or
	// from the environment variable "password_env" names. At most one of
	// the three may be given; a file or variable that cannot be read is
	// an error. Empty for none.
	Password string
	// DB is "db", the database of a standalone server (or of the
	// Sentinels' primary); 0 (the default) for a Cluster, which has no
	// other.
	DB int
	// TLS is "tls": true, or a mapping of ca_file, server_name and
	// insecure_skip_verify (which imply true).
	TLS RedisTLS
	// Timeout is "timeout", every call's deadline; DefaultRedisTimeout
	// (50ms) when left out. A call past it is a store error, to which
	// on_store_error applies.
	Timeout time.Duration
	// KeyPrefix is "key_prefix", the start of every key the gateway
	// writes; DefaultRedisKeyPrefix ("sluice:") when left out. Give each
	// deployment sharing one Redis its own, and the same to every gateway
	// of one fleet.
	KeyPrefix string
	// FleetSize is "fleet_size", the number of gateways sharing the
	// store; under on_store_error local each limits alone to its share,
	// the rule's limit and burst divided by it (rounded up). Default 1.
	FleetSize int
	// AutoPipeline is "auto_pipeline": send concurrent decisions' calls
	// together, one write per connection (redis.ClientOptions.AutoPipeline:
	// it helps many callers over many keys, not one hot key). Default
	// false.
	AutoPipeline bool
	// Breaker is "breaker": the circuit breaker that stops calling a Redis
	// whose calls keep failing. "off" (or false) turns it off; a mapping
	// of window, min_calls and failure_rate tunes it; "on", true or left
	// out, the store's defaults (1s, 20 calls, 0.5).
	Breaker RedisBreaker
}

// RedisBreaker is the redis section's "breaker". Its zero value is the
// store's default breaker; a zero field takes that field's default.
type RedisBreaker struct {
	// Off turns the breaker off: every call goes to Redis and waits out
	// its deadline however many have failed.
	Off bool
	// Window is "window", the span over which the error rate is judged;
	// at least 10ms.
	Window time.Duration
	// MinCalls is "min_calls", how many calls must have ended within the
	// window before it is judged; at least 1.
	MinCalls int
	// FailureRate is "failure_rate", the share of the window's calls
	// that must have failed for the circuit to open: above 0, at most 1.
	FailureRate float64
}

// MinBreakerWindow is the shortest breaker window: the store judges it in
// ten slices of at least a millisecond.
const MinBreakerWindow = 10 * time.Millisecond

// String gives b as ParseRedisBreaker reads it: "off", "default", or the
// fields set, such as "window=2s,min_calls=50".
func (b RedisBreaker) String() string {
	if b.Off {
		return "off"
	}
	var parts []string
	if b.Window != 0 {
		parts = append(parts, "window="+b.Window.String())
	}
	if b.MinCalls != 0 {
		parts = append(parts, "min_calls="+strconv.Itoa(b.MinCalls))
	}
	if b.FailureRate != 0 {
		parts = append(parts, "failure_rate="+strconv.FormatFloat(b.FailureRate, 'g', -1, 64))
	}
	if len(parts) == 0 {
		return "default"
	}
	return strings.Join(parts, ",")
}

// ParseRedisBreaker reads a breaker from a command line: "off",
// "default", or comma-separated window=DURATION, min_calls=N and
// failure_rate=R, each optional (what is left out keeps its default), as
// in "window=2s,min_calls=50,failure_rate=0.8".
func ParseRedisBreaker(s string) (RedisBreaker, error) {
	var b RedisBreaker
	switch s {
	case "off", "false":
		return RedisBreaker{Off: true}, nil
	case "default", "on", "true":
		return b, nil
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return b, fmt.Errorf("want off, default, or window=DURATION,min_calls=N,failure_rate=R; got %q", part)
		}
		if seen[name] {
			return b, fmt.Errorf("%s given twice", name)
		}
		seen[name] = true
		var reason string
		switch name {
		case "window":
			d, err := time.ParseDuration(value)
			if err != nil {
				return b, fmt.Errorf("window: want a duration such as 1s, got %q", value)
			}
			b.Window, reason = d, checkBreakerWindow(d)
		case "min_calls":
			n, err := strconv.Atoi(value)
			if err != nil {
				return b, fmt.Errorf("min_calls: want a whole number, got %q", value)
			}
			b.MinCalls, reason = n, checkBreakerMinCalls(int64(n))
		case "failure_rate":
			r, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return b, fmt.Errorf("failure_rate: want a number such as 0.5, got %q", value)
			}
			b.FailureRate, reason = r, checkBreakerRate(r)
		default:
			return b, fmt.Errorf("unknown setting %q (want window, min_calls or failure_rate)", name)
		}
		if reason != "" {
			return b, fmt.Errorf("%s: %s", name, reason)
		}
	}
	return b, nil
}

// checkBreakerWindow, checkBreakerMinCalls and checkBreakerRate say what is
// wrong with a breaker's setting, or "".
func checkBreakerWindow(d time.Duration) string {
	if d < MinBreakerWindow {
		return fmt.Sprintf("must be at least %v, got %v", MinBreakerWindow, d)
	}
	return ""
}

func checkBreakerMinCalls(n int64) string {
	if n < 1 || n > 1<<30 {
		return fmt.Sprintf("want 1 or more calls, got %d (breaker: off turns the breaker off)", n)
	}
	return ""
}

func checkBreakerRate(r float64) string {
	if !(r > 0 && r <= 1) {
		return fmt.Sprintf("want a share above 0 and at most 1, such as 0.5, got %v", r)
	}
	return ""
}

// RedisTLS is the redis section's "tls": whether to connect with TLS and
// how to check the server.
type RedisTLS struct {
	// Enabled is "tls: true", or implied by a tls mapping.
	Enabled bool
	// CAFile is "ca_file", a PEM file of the certificates that may sign
	// the server's; empty means the system's roots. It is read and checked
	// when the configuration is parsed.
	CAFile string
	// ServerName is "server_name", the name the server's certificate must
	// carry; empty means the host of the address dialled.
	ServerName string
	// InsecureSkipVerify is "insecure_skip_verify": accept any
	// certificate. For tests only.
	InsecureSkipVerify bool

	roots *x509.CertPool // CAFile's certificates, read by Parse
}

// Config returns the TLS configuration to dial Redis with, or nil when TLS
// is not enabled.
func (t RedisTLS) Config() (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	switch {
	case t.roots != nil:
		c.RootCAs = t.roots
	case t.CAFile != "":
		roots, err := readCAFile(t.CAFile)
		if err != nil {
			return nil, err
		}
		c.RootCAs = roots
	}
	return c, nil
}

// readCAFile reads a PEM file of certificates into a pool.
func readCAFile(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return roots, nil
}

// Equal reports whether s and o say the same.
func (s Store) Equal(o Store) bool {
	s.Redis.TLS.roots, o.Redis.TLS.roots = nil, nil
	return reflect.DeepEqual(s, o)
}

// String describes the store section for logs, leaving the password out:
// it says only whether one is set.
func (s Store) String() string {
	if s.Backend != BackendRedis {
		return fmt.Sprintf("{Backend:%s Dir:%s Durability:%v FlushInterval:%v}", s.Backend, s.Dir, s.Durability, s.FlushInterval)
	}
	r := s.Redis
	return fmt.Sprintf("{Backend:redis Addrs:%v MasterName:%s Username:%s Password:%s DB:%d TLS:%t KeyPrefix:%q Timeout:%v FleetSize:%d Breaker:%v}",
		r.Addrs, r.MasterName, r.Username, map[bool]string{false: "(none)", true: "(set)"}[r.Password != ""], r.DB, r.TLS.Enabled, r.KeyPrefix, r.Timeout, r.FleetSize, r.Breaker)
}

// Error reports a configuration that does not parse or validate, with the
// place and the key at fault: File, Line (0 when unknown), Field (such as
// "rules[1].window"; empty for the document as a whole), Reason, and Err,
// the cause or nil. Its Error method returns "file:line: field: reason",
// leaving out what is unknown. It matches sluice.ErrInvalidConfig and
// unwraps to the cause (a *sluice.RuleError for an invalid rule). The
// envoyproxy/ratelimit readers (envoyrls and its packages) return it too.
type Error = configerr.Error

// Ruleset returns the configuration's rules, default and match mode
// compiled. For a Config from Parse it is the ruleset validated there; for
// one built by hand it is compiled now.
func (c *Config) Ruleset() (*sluice.Ruleset, error) {
	if c.ruleset != nil {
		return c.ruleset, nil
	}
	rs, err := sluice.NewRuleset(c.Rules, c.Default, c.Match)
	if err != nil {
		return nil, err
	}
	return rs.WithOverrides(c.Overrides)
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
	p := parser{Reader: yamlnode.Reader{File: name}}
	root, err := p.document(data)
	if err != nil {
		return nil, err
	}
	c := &Config{
		Store:        defaultStore(),
		Identity:     identity.Config{}.WithDefaults(),
		OnStoreError: sluice.FailOpen,
		Match:        sluice.MatchMostSpecific,
	}
	if err := p.config(root, c); err != nil {
		return nil, err
	}
	return c, nil
}

// defaultStore is the store section left out: memory, with every default.
func defaultStore() Store {
	return Store{Backend: DefaultBackend, Durability: engine.Interval, FlushInterval: DefaultFlushInterval,
		Redis: Redis{Timeout: DefaultRedisTimeout, KeyPrefix: DefaultRedisKeyPrefix, FleetSize: DefaultFleetSize}}
}

// LoadStore reads only the store section of the file at path, checked as
// Parse checks it: a gateway configuration, whose other sections are left
// unread, or a file holding a store section alone, for a command (such as
// `sluice rls --store`) that takes its rules from elsewhere. A file
// without a store section is an error.
func LoadStore(path string) (Store, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Store{}, err
	}
	p := parser{Reader: yamlnode.Reader{File: path}}
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
		case "identity", "on_store_error", "match", "rules", "default", "overrides":
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
		case "match":
			var s string
			s, err = p.OneOf(v, field, string(sluice.MatchMostSpecific), string(sluice.MatchAll))
			c.Match = sluice.MatchMode(s)
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
	rs, err := sluice.NewRuleset(c.Rules, c.Default, c.Match)
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
	if len(c.Rules) == 0 && c.Default == nil {
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
		reason = fmt.Sprintf("rule %q: %s", re.Rule, re.Reason)
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
		case "method", "path_prefix", "host":
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
			default:
				r.Host = s
			}
		case "scope":
			var s string
			s, err = p.Str(v, field)
			r.Scope = sluice.Scope(s)
		case "algorithm":
			r.Algorithm, err = p.Str(v, field)
		case "limit":
			r.Limit, err = p.Int(v, field)
		case "window":
			r.Window, err = p.Duration(v, field)
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
		case "shadow":
			r.Shadow, err = p.Bool(v, field)
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
		required = fmt.Sprintf("rule %q: required", r.Name)
	}
	if !isDefault && r.PathPrefix == "" {
		if _, given := lines["path_prefix"]; !given {
			return sluice.Rule{}, nil, p.Errorf(n.Line, configerr.Join(path, "path_prefix"), "%s", required)
		}
	}
	for _, req := range []string{"name", "scope", "algorithm", "limit", "window"} {
		if _, given := lines[req]; !given {
			return sluice.Rule{}, nil, p.Errorf(n.Line, configerr.Join(path, req), "%s", required)
		}
	}
	return r, lines, nil
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
				return true, p.Errorf(v.Line, field, "want a list of host:port, such as [%s]", v.Value)
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
					return true, p.Errorf(item.Line, f, "want host:port, such as 127.0.0.1:6379, got %q: %s", a, reason)
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
				var data []byte
				if data, err = os.ReadFile(file); err != nil {
					err = p.Errorf(v.Line, field, "cannot read the password: %v", err)
				} else {
					r.Password = strings.TrimRight(string(data), "\r\n")
				}
			}
		case "password_env":
			var name string
			if name, err = p.Str(v, field); err == nil {
				var set bool
				if r.Password, set = os.LookupEnv(name); !set {
					err = p.Errorf(v.Line, field, "the environment variable %s is not set", name)
				}
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
				if t.roots, err = readCAFile(t.CAFile); err != nil {
					err = p.Errorf(v.Line, field, "%v", err)
				}
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

func (p *parser) identity(n *yaml.Node, path string, id *identity.Config) error {
	header := func(v *yaml.Node, field string) (string, error) {
		s, err := p.Str(v, field)
		if err != nil {
			return "", err
		}
		if !identity.ValidHeaderName(s) {
			return "", p.Errorf(v.Line, field, "want an HTTP header name, got %q", s)
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
