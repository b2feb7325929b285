package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/internal/configerr"
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

// Defaults of the server section: nginx's for the same settings
// (keepalive_timeout, client_body_timeout, send_timeout, and its
// worker_connections of 1024 for the connection cap).
const (
	DefaultIdleTimeout       = 75 * time.Second
	DefaultClientBodyTimeout = 60 * time.Second
	DefaultSendTimeout       = 60 * time.Second
	DefaultMaxConnections    = 1024
)

// Defaults of the server section's minimum body rate: ASP.NET Core
// Kestrel's MinRequestBodyDataRate (240 bytes a second after a grace of
// 5s). nginx has none: its client_body_timeout alone never cuts a body
// that sends a byte a second, and it holds no upstream connection while it
// buffers the body; serve streams the body upstream, so a slow body would
// hold an upstream connection as long as it trickles.
const (
	DefaultClientBodyMinRate   = 240
	DefaultClientBodyRateGrace = 5 * time.Second
)

// DefaultThrottledPerRule and MaxThrottledPerRule are the server section's
// throttled_per_rule default and bound: package throttled's DefaultPerRule
// and MaxPerRule.
const (
	DefaultThrottledPerRule = 256
	MaxThrottledPerRule     = 1 << 16
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
	// sluice.LocalFallback).
	OnStoreError sluice.StoreErrorPolicy
	// Match is "match": sluice.MatchMostSpecific (default) or
	// sluice.MatchAll.
	Match sluice.MatchMode
	// PathCase is "path_case": sluice.PathCaseSensitive (default), or
	// sluice.PathCaseInsensitive for an upstream that routes paths in any
	// case (Express's default), so that /API/Orders spends on a rule for
	// /api/orders.
	PathCase sluice.PathCase
	// ForwardPath is "forward_path", which path sluice serve sends
	// upstream: ForwardCanonical (default) or ForwardOriginal.
	ForwardPath ForwardPath
	// Rules is "rules", in file order. A rule's keys are its fields' names
	// in snake case (name, method, path_prefix or path, group, counter, scope, algorithm, limit,
	// window, burst, cost, shadow); "shadow: true" sets Rule.Shadow.
	Rules []sluice.Rule
	// Default is "default", the rule for requests no rule covers, or nil.
	Default *sluice.Rule
	// Overrides is "overrides": callers given their own limit on a rule,
	// their keys as the doors build them (see overrides.go).
	Overrides []sluice.Override
	// Response is the "response" section: how a denial is answered.
	Response Response
	// Server is the "server" section: the gateway's listeners' timeouts,
	// connection cap and admin host names. It is read at start only.
	Server Server
	// Exempt is "exempt": the callers no rule limits, each written as
	// overrides' callers are (user:ID, key:API_KEY, keyhash:HEX,
	// ip:ADDRESS), or ip: and a prefix (ip:10.0.0.0/8) for a network.
	// Exemptions reload with the file. See ExemptFunc.
	Exempt []string
	// AllowEmpty is "allow_empty": true says that the file limits nothing
	// on purpose (no rule and no default, or only shadow ones), so a
	// reload puts it in force even where rules were in force; without it
	// such a reload is refused (Watcher), since a file cut short by a
	// writer that is not atomic reads as one. A file that sets it and has
	// a rule that limits is refused. False by default.
	AllowEmpty bool
	// Warnings are what the file says that is valid but most likely not
	// what was meant, each naming the file, the line, the field and the
	// risk (a file that limits nothing; on_store_error: local on a store
	// in the gateway's own process). A command should log them.
	Warnings []string

	ruleset *sluice.Ruleset // compiled from the above by Parse
}

// ForwardPath is which spelling of a request's path a gateway sends to
// its upstream ("forward_path").
type ForwardPath string

// The forward paths.
const (
	// ForwardCanonical, the default, sends the path the rules matched
	// (sluice.CanonicalPath, in its letters' case as sent) with the query
	// as sent: the upstream can route no other resource than the one the
	// rules limited, whatever it does with "//", "." or "..". A %2F in the
	// path goes as "/", as it was matched.
	ForwardCanonical ForwardPath = "canonical"
	// ForwardOriginal sends the path as the client spelt it, byte for
	// byte: for an upstream that needs it so (a signed URL, %2F kept as
	// data). Then the upstream must route every spelling as the canonical
	// path or refuse it, or a spelling may reach a resource the rules
	// matched apart.
	ForwardOriginal ForwardPath = "original"
)

// Valid reports whether f is a known forward path.
func (f ForwardPath) Valid() bool { return f == ForwardCanonical || f == ForwardOriginal }

// LimitsNothing reports whether no rule and no default of c enforces a
// limit: there is none, or each is a shadow rule.
func (c *Config) LimitsNothing() bool { return c.enforcing() == nil }

// enforcing returns the first rule of c that enforces a limit (the default
// last), or nil.
func (c *Config) enforcing() *sluice.Rule {
	for i := range c.Rules {
		if !c.Rules[i].Shadow {
			return &c.Rules[i]
		}
	}
	if c.Default != nil && !c.Default.Shadow {
		return c.Default
	}
	return nil
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

// Server is the "server" section: how the gateway treats slow and idle
// clients, and which host names its admin listener answers to. Each
// timeout counts inactivity, not the length of an exchange: a body or a
// response that keeps moving is never cut, however long it lasts.
type Server struct {
	// IdleTimeout is "idle_timeout", how long a keep-alive connection may
	// wait for its next request (nginx's keepalive_timeout);
	// DefaultIdleTimeout (75s) when left out.
	IdleTimeout time.Duration
	// ClientBodyTimeout is "client_body_timeout", the longest a request
	// body may go without sending a byte while it is read (nginx's
	// client_body_timeout); DefaultClientBodyTimeout (60s) when left out.
	ClientBodyTimeout time.Duration
	// ClientBodyMinRate is "client_body_min_rate", in bytes a second: once
	// ClientBodyRateGrace has passed since a request's headers were read,
	// its body must have arrived at least this fast on average, or it is
	// cut as ClientBodyTimeout cuts it (408). Zero turns it off;
	// DefaultClientBodyMinRate (240) when left out.
	ClientBodyMinRate int64
	// ClientBodyRateGrace is "client_body_rate_grace", how long a body may
	// take before ClientBodyMinRate applies; DefaultClientBodyRateGrace
	// (5s) when left out.
	ClientBodyRateGrace time.Duration
	// SendTimeout is "send_timeout", the longest one write of the
	// response to the client may wait (nginx's send_timeout);
	// DefaultSendTimeout (60s) when left out.
	SendTimeout time.Duration
	// MaxConnections is "max_connections", the most client connections
	// open at once; past it a new connection waits to be accepted until one
	// closes (nginx's worker_connections); DefaultMaxConnections (1024)
	// when left out.
	MaxConnections int
	// AdminHosts is "admin_hosts": the host names the admin listener
	// answers to besides IP addresses, localhost and its own address's
	// host (see docs/serve.md, admin listener security). Empty by default.
	AdminHosts []string

	// The listeners and the upstream, each under the serve flag of the
	// same name, which overrides it: "listen" (--listen), the proxy's
	// address; "upstream" (--upstream), the http or https URL requests
	// are passed to; "admin" (--admin), the admin listener's address;
	// "admin_token_file" (--admin-token-file), the file holding its
	// bearer token, relative to the configuration file's directory;
	// "usage_listen" (--usage-listen), the listener answering GET
	// /v1/usage for the request's own caller. An address is host:port or
	// :port. Each is empty when left out: serve then needs the flag for
	// listen and upstream, and runs no such listener otherwise.
	Listen, Upstream, Admin, AdminTokenFile, UsageListen string
	// TLSCert, TLSKey and TLSClientCA are "tls_cert", "tls_key" and
	// "tls_client_ca" (--tls-cert, --tls-key, --tls-client-ca): the PEM
	// files the proxy's listener (and the usage listener) serve TLS with,
	// and the CA its clients' certificates must be signed by (mutual TLS),
	// each relative to the configuration file's directory. Empty when left
	// out: no TLS.
	TLSCert, TLSKey, TLSClientCA string
	// ThrottledPerRule is "throttled_per_rule" (--throttled-per-rule),
	// how many callers the admin listener's /v1/throttled keeps per rule:
	// 0 turns the list off; DefaultThrottledPerRule (256) when left out,
	// at most MaxThrottledPerRule.
	ThrottledPerRule int
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
		if _, own, nested := sluice.SplitNestedKey(k); nested {
			return nil, fmt.Errorf("exempt %q: name the caller's own key, %s, which is exempt within every tenant", e, identity.ShowKey(own))
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

	refs []reference // what the section names, until ReadReferences reads it
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
	// an error. The file and the variable are read by ReadReferences (Load
	// calls it), not by Parse. Empty for none.
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
	// by ReadReferences (Load), or else by Config when it is called.
	CAFile string
	// ServerName is "server_name", the name the server's certificate must
	// carry; empty means the host of the address dialled.
	ServerName string
	// InsecureSkipVerify is "insecure_skip_verify": accept any
	// certificate. For tests only.
	InsecureSkipVerify bool

	roots *x509.CertPool // CAFile's certificates, read by ReadReferences
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

// Equal reports whether s and o say the same.
func (s Store) Equal(o Store) bool {
	s.Redis.TLS.roots, o.Redis.TLS.roots = nil, nil
	s.refs, o.refs = nil, nil
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
	rs, err := sluice.NewRulesetWith(c.Rules, c.Default, c.rulesetOptions())
	if err != nil {
		return nil, err
	}
	return rs.WithOverrides(c.Overrides)
}

// rulesetOptions returns the ruleset's settings the configuration holds.
func (c *Config) rulesetOptions() sluice.RulesetOptions {
	return sluice.RulesetOptions{Match: c.Match, PathCase: c.PathCase}
}
