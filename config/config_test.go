package config_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/identity"
)

func TestLoadTheIssueConfig(t *testing.T) {
	c, err := config.Load(filepath.Join("..", "testdata", "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Config{
		// The file's dir is relative to the file: ../var/sluice from
		// testdata/.
		Store: config.Store{Backend: "pebble", Dir: filepath.Join("..", "var", "sluice"), Durability: engine.Interval, FlushInterval: 50 * time.Millisecond, Redis: redisDefaults},
		// No trusted proxy: the example is served on a port any local
		// process can reach, and a trusted client may name any address.
		Identity:     identity.Config{UserHeader: "X-User-ID", APIKeyHeader: "X-API-Key", ForwardingHeader: identity.XForwardedFor, IPv6Prefix: 64},
		OnStoreError: sluice.FailOpen,
		Match:        sluice.MatchMostSpecific,
		Rules: []sluice.Rule{
			{Name: "orders-write", Method: "POST", PathPrefix: "/api/orders", Scope: sluice.ScopeUser, Algorithm: algo.TokenBucketName, Limit: 5, Window: time.Minute},
			{Name: "search", Method: "GET", PathPrefix: "/api/search", Scope: sluice.ScopeUser, Algorithm: algo.SlidingCounterName, Limit: 10, Window: time.Minute, Cost: 5},
		},
		Default: &sluice.Rule{Name: "catch-all", Scope: sluice.ScopeIP, Algorithm: algo.SlidingCounterName, Limit: 100, Window: time.Minute},
	}
	if !reflect.DeepEqual(c.Store, want.Store) || !reflect.DeepEqual(c.Identity, want.Identity) ||
		c.OnStoreError != want.OnStoreError || c.Match != want.Match ||
		!reflect.DeepEqual(c.Rules, want.Rules) || !reflect.DeepEqual(c.Default, want.Default) {
		t.Errorf("LoadConfig =\n%+v\nwant\n%+v", *c, want)
	}
	rs, err := c.Ruleset()
	if err != nil {
		t.Fatal(err)
	}
	if m := rs.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: "/api/orders"}); len(m) != 1 || m[0].Name() != "orders-write" {
		t.Errorf("Match(POST /api/orders) = %v", names(m))
	}
	if m := rs.AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: "/"}); len(m) != 1 || m[0].Name() != "catch-all" || m[0].Scope() != sluice.ScopeIP {
		t.Errorf("Match(GET /) = %v, want catch-all", names(m))
	}
}

// redisDefaults is the redis section a parsed Config holds when the file
// has none.
var redisDefaults = config.Redis{Timeout: config.DefaultRedisTimeout, KeyPrefix: "sluice:", FleetSize: 1}

func TestParseConfigDefaults(t *testing.T) {
	c, err := config.Parse("min.yaml", []byte("rules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Config{
		Store:        config.Store{Backend: "memory", Durability: engine.Interval, FlushInterval: 50 * time.Millisecond, Redis: redisDefaults},
		Identity:     identity.Config{UserHeader: "X-User-ID", APIKeyHeader: "X-API-Key", ForwardingHeader: identity.XForwardedFor, IPv6Prefix: 64},
		OnStoreError: sluice.FailOpen,
		Match:        sluice.MatchMostSpecific,
		Rules:        []sluice.Rule{},
	}
	if !reflect.DeepEqual(c.Store, want.Store) || !reflect.DeepEqual(c.Identity, want.Identity) ||
		c.OnStoreError != want.OnStoreError || c.Match != want.Match || c.Default != nil || len(c.Rules) != 0 {
		t.Errorf("ParseConfig = %+v, want %+v", *c, want)
	}
}

func TestParseConfigIdentityAndModes(t *testing.T) {
	c, err := config.Parse("x.yaml", []byte(`
store: {backend: bolt, dir: /tmp/s, durability: sync, flush_interval: 1s}
identity:
  user_header: X-Caller
  trusted_proxies: [10.0.0.1, "2001:db8::1", 10.1.2.3/8, "::ffff:192.168.0.0/112"]
  forwarding_header: forwarded
  ipv6_prefix: 48
  headers_from_trusted_proxies_only: true
on_store_error: closed
match: all
`))
	if err != nil {
		t.Fatal(err)
	}
	wantProxies := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.1/32"), netip.MustParsePrefix("2001:db8::1/128"),
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.0.0/16"),
	}
	if !reflect.DeepEqual(c.Identity.TrustedProxies, wantProxies) {
		t.Errorf("TrustedProxies = %v, want %v", c.Identity.TrustedProxies, wantProxies)
	}
	if c.Identity.UserHeader != "X-Caller" || c.Identity.APIKeyHeader != "X-API-Key" || c.Identity.IPv6Prefix != 48 || !c.Identity.HeadersFromTrustedProxiesOnly || c.Identity.ForwardingHeader != identity.Forwarded {
		t.Errorf("Identity = %+v", c.Identity)
	}
	if !c.Store.Equal(config.Store{Backend: "bolt", Dir: "/tmp/s", Durability: engine.Sync, FlushInterval: time.Second, Redis: redisDefaults}) {
		t.Errorf("Store = %+v", c.Store)
	}
	if c.OnStoreError != sluice.FailClosed || c.Match != sluice.MatchAll {
		t.Errorf("OnStoreError, Match = %q, %q", c.OnStoreError, c.Match)
	}
}

func TestPathCaseAndForwardPath(t *testing.T) {
	rules := "rules:\n  - {name: orders, method: POST, path_prefix: /api/orders, scope: user, algorithm: gcra, limit: 1, window: 1s}\n"
	c, err := config.Parse("x.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	if c.PathCase != sluice.PathCaseSensitive || c.ForwardPath != config.ForwardCanonical {
		t.Errorf("defaults: PathCase, ForwardPath = %q, %q, want sensitive, canonical", c.PathCase, c.ForwardPath)
	}
	c, err = config.Parse("x.yaml", []byte("path_case: insensitive\nforward_path: original\n"+rules))
	if err != nil {
		t.Fatal(err)
	}
	if c.PathCase != sluice.PathCaseInsensitive || c.ForwardPath != config.ForwardOriginal {
		t.Errorf("PathCase, ForwardPath = %q, %q, want insensitive, original", c.PathCase, c.ForwardPath)
	}
	for _, hand := range []bool{false, true} {
		cc := c
		if hand { // a Config built by hand compiles its ruleset from the fields
			cc = &config.Config{Rules: c.Rules, PathCase: c.PathCase}
		}
		rs, err := cc.Ruleset()
		if err != nil {
			t.Fatal(err)
		}
		if m := rs.AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: "//API/./Orders"}); len(m) != 1 {
			t.Errorf("built by hand %v: Match(POST //API/./Orders) = %v, want orders", hand, names(m))
		}
	}
}

// issueConfig returns the issue's example with old replaced by new.
func issueConfig(t *testing.T, old, new string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("the example has no %q", old)
	}
	return strings.Replace(string(data), old, new, 1)
}

func TestBadConfigsNameTheLineAndTheField(t *testing.T) {
	tests := []struct {
		name   string
		config string
		want   string // the whole error
		target error
	}{
		{"bad duration", issueConfig(t, "limit: 10\n    window: 1m", "limit: 10\n    window: 1 minute"),
			`config.yaml:27: rules[1].window: want a duration such as 1m or 500ms, got "1 minute"`, nil},
		{"unknown top-level key", issueConfig(t, "match: most_specific", "matching: most_specific"),
			"config.yaml:12: matching: unknown key", nil},
		{"unknown rule key", issueConfig(t, "    cost: 5", "    costs: 5"),
			"config.yaml:28: rules[1].costs: unknown key", nil},
		{"wrong type", issueConfig(t, "limit: 5", "limit: five"),
			`config.yaml:19: rules[0].limit: want an integer, got "five"`, nil},
		{"float limit", issueConfig(t, "limit: 5", "limit: 5.5"),
			`config.yaml:19: rules[0].limit: want an integer, got the number 5.5`, nil},
		{"invalid rule", issueConfig(t, "limit: 10\n    window: 1m", "limit: 10\n    window: 0s"),
			`config.yaml:27: rules[1].window: rule "search": must be positive, got 0s`, algo.ErrInvalidParams},
		{"cost above capacity", issueConfig(t, "cost: 5", "cost: 11"),
			`config.yaml:28: rules[1].cost: rule "search": cost exceeds capacity: cost 11 can never fit a capacity of 10`, algo.ErrCostExceedsCapacity},
		{"unknown algorithm", issueConfig(t, "algorithm: token_bucket", "algorithm: bucket"),
			`config.yaml:18: rules[0].algorithm: rule "orders-write": must be one of [token_bucket leaky_bucket fixed_window sliding_log sliding_counter gcra] or concurrency, got "bucket"`, algo.ErrUnknownAlgorithm},
		{"duplicate name", issueConfig(t, "name: search", "name: orders-write"),
			`config.yaml:21: rules[1].name: rule "orders-write": duplicate: rules[0] has the same name`, sluice.ErrInvalidRule},
		{"missing window", issueConfig(t, "    limit: 5\n    window: 1m\n", "    limit: 5\n"),
			"config.yaml:14: rules[0].window: rule \"orders-write\": required", nil},
		{"bad scope", issueConfig(t, "scope: ip", "scope: tenant"),
			`config.yaml:31: default.scope: rule "catch-all": must be one of user, api_key, ip, global, header:NAME, attr:NAME or param:NAME, got "tenant"`, sluice.ErrInvalidRule},
		{"path on the default", issueConfig(t, "  scope: ip", "  path_prefix: /x\n  scope: ip"),
			"config.yaml:31: default.path_prefix: not allowed: the default covers every request no rule covers", nil},
		{"bad backend", issueConfig(t, "backend: pebble", "backend: etcd"),
			`config.yaml:2: store.backend: want one of memory, pebble, bolt, redis, got "etcd"`, nil},
		{"durable backend without dir", issueConfig(t, "  dir: ../var/sluice      # relative to this file: ./var/sluice from the repository's root\n", ""),
			"config.yaml:2: store.dir: required for the pebble backend", nil},
		{"bad flush interval", issueConfig(t, "flush_interval: 50ms", "flush_interval: 50"),
			`config.yaml:5: store.flush_interval: want a duration such as 1m or 500ms, got "50"`, nil},
		{"bad proxy", issueConfig(t, "# trusted_proxies: [10.0.0.2]", "trusted_proxies: [10.0.0.2, localhost]"),
			`config.yaml:9: identity.trusted_proxies[1]: want an address or a prefix such as 10.0.0.0/8, got "localhost"`, nil},
		{"bad path case", issueConfig(t, "match: most_specific", "match: most_specific\npath_case: lower"),
			`config.yaml:13: path_case: want one of sensitive, insensitive, got "lower"`, nil},
		{"bad forward path", issueConfig(t, "match: most_specific", "match: most_specific\nforward_path: cleaned"),
			`config.yaml:13: forward_path: want one of canonical, original, got "cleaned"`, nil},
		{"path prefix matching no canonical path", issueConfig(t, "path_prefix: /api/orders", "path_prefix: /api//orders"),
			`config.yaml:16: rules[0].path_prefix: rule "orders-write": request paths are matched in canonical form (repeated slashes merged, "." and ".." segments removed), so "/api//orders" would match none: write "/api/orders"`, sluice.ErrInvalidRule},
		{"prefixes differing in case only, path_case insensitive", strings.NewReplacer("path_prefix: /api/search", "path_prefix: /API/Orders", "method: GET", "method: POST").
			Replace(issueConfig(t, "match: most_specific", "match: most_specific\npath_case: insensitive")),
			`config.yaml:24: rules[1].path_prefix: rule "search": rule "orders-write" has the same method and path prefix and always wins in most_specific mode`, sluice.ErrInvalidRule},
		{"bad ipv6 prefix", issueConfig(t, "ipv6_prefix: 64", "ipv6_prefix: 129"),
			"config.yaml:10: identity.ipv6_prefix: want a prefix length from 1 to 128, got 129", nil},
		{"bad forwarding header", issueConfig(t, "ipv6_prefix: 64", "forwarding_header: x-real-ip"),
			`config.yaml:10: identity.forwarding_header: want one of x-forwarded-for, forwarded, got "x-real-ip"`, nil},
		{"bad header", issueConfig(t, "user_header: X-User-ID", "user_header: X User"),
			`config.yaml:7: identity.user_header: want an HTTP header name, got "X User"`, nil},
		{"bad policy", issueConfig(t, "on_store_error: open", "on_store_error: maybe"),
			`config.yaml:11: on_store_error: want one of open, closed, local, got "maybe"`, nil},
		{"rules not a list", issueConfig(t, "match: most_specific", "match: [all]"),
			"config.yaml:12: match: want a string, got a list", nil},
		{"key twice", issueConfig(t, "    cost: 5", "    cost: 5\n    cost: 4"),
			"config.yaml:29: rules[1].cost: given twice", nil},
		{"zero cost", issueConfig(t, "cost: 5", "cost: 0"),
			"config.yaml:28: rules[1].cost: must be positive when given, got 0", nil},
		{"syntax error", "rules:\n  - name: a\n   scope: ip\n", "", nil},
		{"badly indented key", issueConfig(t, "  api_key_header: X-API-Key", " api_key_header: X-API-Key"),
			"config.yaml:8: did not find expected key", nil},
		{"badly indented rule key", issueConfig(t, "    cost: 5", "   cost: 5"),
			"config.yaml:28: did not find expected '-' indicator", nil},
		{"badly indented key on line 7", "identity:\n  user_header: X-User-ID\n  api_key_header: X-API-Key\n" +
			"  ipv6_prefix: 64\n  forwarding_header: x-forwarded-for\n  headers_from_trusted_proxies_only: false\n" +
			" trusted_proxies: [10.0.0.2]\nrules: []\n",
			"config.yaml:7: did not find expected key", nil},
		{"empty", "", "config.yaml: the configuration is empty", nil},
		{"comments only", "# nothing\n", "config.yaml: the configuration is empty", nil},
		{"not a mapping", "- a\n", "config.yaml:1: want a mapping, got a list", nil},
		{"two documents", "match: all\n---\nmatch: all\n", "config.yaml:2: want one YAML document, found another", nil},
		{"alias", "rules:\n  - &r {name: a}\n  - *r\n", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse("config.yaml", []byte(tt.config))
			if err == nil {
				t.Fatal("ParseConfig = nil error, want one")
			}
			if !errors.Is(err, sluice.ErrInvalidConfig) {
				t.Errorf("errors.Is(%v, ErrInvalidConfig) = false", err)
			}
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %T, want *ConfigError", err)
			}
			if tt.want == "" {
				if ce.Line == 0 {
					t.Errorf("error %q has no line", err)
				}
			} else if got := err.Error(); got != tt.want {
				t.Errorf("error\n got %s\nwant %s", got, tt.want)
			}
			if tt.target != nil && !errors.Is(err, tt.target) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.target)
			}
		})
	}
}

// The YAML library reports a syntax error only as text, "yaml: line N:
// problem"; Parse reads the problem from it. This pins the text, so that an
// upgrade of the library that changes it fails here rather than quietly
// losing the problem from the errors users see.
func TestYAMLErrorText(t *testing.T) {
	var n yaml.Node
	err := yaml.Unmarshal([]byte("a: 1\nb: 2\nc 2\nd: 3\n"), &n)
	if err == nil || err.Error() != "yaml: line 3: could not find expected ':'" {
		t.Fatalf("yaml.Unmarshal = %v, want the text Parse reads: yaml: line 3: could not find expected ':'", err)
	}
	_, err = config.Parse("c.yaml", []byte("a: 1\nb: 2\nc 2\nd: 3\n"))
	if got, want := fmt.Sprint(err), "c.yaml:3: could not find expected ':'"; got != want {
		t.Errorf("Parse = %s, want %s", got, want)
	}
}

func TestLoadConfigMissingFile(t *testing.T) {
	if _, err := config.Load(filepath.Join(t.TempDir(), "none.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadConfig(missing) = %v, want os.ErrNotExist", err)
	}
}

func FuzzParseConfig(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join("..", "testdata", "gateway.yaml")); err == nil {
		f.Add(data)
	}
	f.Add([]byte("rules: []\n"))
	f.Add([]byte("allow_empty: true\nrules: []\n"))
	f.Add([]byte("allow_empty: true\nrules:\n  - {name: a, path_prefix: /, scope: ip, algorithm: gcra, limit: 1, window: 1s, shadow: true}\n"))
	f.Add([]byte("match: all\nrules:\n  - {name: a, path_prefix: /, scope: ip, algorithm: gcra, limit: 1, window: 1s}\n"))
	f.Add([]byte("server: {idle_timeout: 75s, client_body_timeout: 1m, send_timeout: 60s, max_connections: 1024, admin_hosts: [a.example]}\nrules: []\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse("fuzz.yaml", data)
		if err != nil {
			var ce *config.Error
			if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), "fuzz.yaml") {
				t.Fatalf("error %T %q, want a *ConfigError naming the file", err, err)
			}
			return
		}
		rs, err := c.Ruleset()
		if err != nil {
			t.Fatalf("a parsed config's Ruleset() = %v", err)
		}
		if c.AllowEmpty && !c.LimitsNothing() {
			t.Fatalf("allow_empty: true parsed on a file that limits")
		}
		for _, r := range c.Rules {
			if err := r.Validate(); err != nil {
				t.Fatalf("a parsed rule does not validate: %v", err)
			}
		}
		rs.AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: "/"})
		if sv := c.Server; sv.IdleTimeout <= 0 || sv.ClientBodyTimeout <= 0 || sv.SendTimeout <= 0 || sv.MaxConnections < 1 {
			t.Fatalf("a parsed server section holds a bound that is not positive: %+v", sv)
		}
	})
}

func names(rs []*sluice.CompiledRule) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.Name())
	}
	return out
}

// Valid but most likely not meant: a file that limits nothing, and
// on_store_error: local over a store in the gateway's own process. They
// load, with warnings naming the line and the risk.
func TestWarnings(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"rules: []\n", "w.yaml:1: rules: no rule and no default: this configuration limits nothing"},
		{"store:\n  backend: pebble\n  dir: /tmp/x\non_store_error: local\ndefault: {name: d, scope: ip, algorithm: gcra, limit: 1, window: 1s}\n",
			"w.yaml:4: on_store_error: local decides in memory while a shared store is down, but the store is pebble"},
	} {
		cfg, err := config.Parse("w.yaml", []byte(c.file))
		if err != nil {
			t.Fatalf("%q: %v", c.file, err)
		}
		if len(cfg.Warnings) != 1 || !strings.HasPrefix(cfg.Warnings[0], c.want) {
			t.Errorf("%q: warnings %q, want one starting %q", c.file, cfg.Warnings, c.want)
		}
	}
	if cfg, err := config.Parse("w.yaml", []byte("default: {name: d, scope: ip, algorithm: gcra, limit: 1, window: 1s}\n")); err != nil || len(cfg.Warnings) != 0 {
		t.Errorf("a plain file: warnings %q, %v", cfg.Warnings, err)
	}
}

// The response section and exempt list: read, checked with the line and
// the field, and exempt entries matched as the doors count callers.
func TestResponseAndExempt(t *testing.T) {
	cfg, err := config.Parse("g.yaml", []byte(`response:
  deny_status: 503
  body: problem
  reset: unix
exempt: [user:ops, key:sk_live_1, ip:10.0.0.0/8, ip:2001:db8::1]
default: {name: d, scope: ip, algorithm: gcra, limit: 1, window: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Response; r.DenyStatus != 503 || !r.Problem || !r.ResetUnix {
		t.Errorf("response %+v", r)
	}
	id, _ := identity.New(cfg.Identity)
	exempt, err := cfg.ExemptFunc(id)
	if err != nil {
		t.Fatal(err)
	}
	apiKey, _ := id.ParseKey("key:sk_live_1")
	for key, want := range map[string]bool{
		"user:ops": true, "user:alice": false, apiKey: true, "ip:10.1.2.3": true, "ip:192.0.2.1": false,
		"ip:2001:db8::/64": true, "ip:2001:db9::/64": false,
	} {
		if got := exempt(key); got != want {
			t.Errorf("exempt(%q) = %v, want %v", key, got, want)
		}
	}
	for _, c := range []struct{ file, want string }{
		{"response: {deny_status: 302}\nrules: []\n", "g.yaml:1: response.deny_status: want a client or server error status, 400 to 599, got 302"},
		{"response: {body: html}\nrules: []\n", "g.yaml:1: response.body:"},
		{"exempt: [user:ops, alice]\nrules: []\n", "g.yaml:1: exempt[1]: sluice/identity: bad caller key"},
		{"exempt: [ip:10.0.0.0/33]\nrules: []\n", "g.yaml:1: exempt[0]: exempt \"ip:10.0.0.0/33\": want ip: and an address or a prefix"},
		{"exempt: [\"{attr:acme}user:ops\"]\nrules: []\n", "name the caller's own key, user:ops"},
	} {
		if _, err := config.Parse("g.yaml", []byte(c.file)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.file, err, c.want)
		}
	}
}

// A rule's host: read, validated with the line, refused on the default.
func TestRuleHost(t *testing.T) {
	cfg, err := config.Parse("h.yaml", []byte("rules:\n  - {name: eu, host: \"*.eu.example.com\", path_prefix: /, scope: ip, algorithm: gcra, limit: 1, window: 1s}\n"))
	if err != nil || cfg.Rules[0].Host != "*.eu.example.com" {
		t.Fatalf("host: %v %+v", err, cfg.Rules)
	}
	for _, c := range []struct{ file, want string }{
		{"rules:\n  - {name: eu, host: EU.example.com, path_prefix: /, scope: ip, algorithm: gcra, limit: 1, window: 1s}\n", `h.yaml:2: rules[0].host: rule "eu": want a host name in lower case`},
		{"default: {name: d, host: a.b, scope: ip, algorithm: gcra, limit: 1, window: 1s}\n", "h.yaml:1: default.host: not allowed"},
	} {
		if _, err := config.Parse("h.yaml", []byte(c.file)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.file, err, c.want)
		}
	}
}

// The server section: nginx's defaults when left out, each key read, and a
// bad value refused naming its field.
func TestServerSection(t *testing.T) {
	cfg, err := config.Parse("g.yaml", []byte("rules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Server{IdleTimeout: 75 * time.Second, ClientBodyTimeout: 60 * time.Second, SendTimeout: 60 * time.Second, MaxConnections: 1024}
	if got := cfg.Server; got.IdleTimeout != want.IdleTimeout || got.ClientBodyTimeout != want.ClientBodyTimeout ||
		got.SendTimeout != want.SendTimeout || got.MaxConnections != want.MaxConnections || len(got.AdminHosts) != 0 ||
		got.ClientBodyMinRate != 240 || got.ClientBodyRateGrace != 5*time.Second || got.ThrottledPerRule != config.DefaultThrottledPerRule ||
		got.Listen != "" || got.Upstream != "" || got.Admin != "" || got.AdminTokenFile != "" || got.UsageListen != "" {
		t.Errorf("defaults: %+v, want %+v", got, want)
	}
	cfg, err = config.Parse("g.yaml", []byte(`server:
  idle_timeout: 5s
  client_body_timeout: 2s
  send_timeout: 3s
  client_body_min_rate: 0
  client_body_rate_grace: 10s
  max_connections: 64
  admin_hosts: [sluice-admin.internal, ops.example.net]
  listen: :8080
  upstream: http://127.0.0.1:8081
  admin: 127.0.0.1:9090
  admin_token_file: secrets/token
  usage_listen: 0.0.0.0:8090
  throttled_per_rule: 0
  tls_cert: /etc/sluice/cert.pem
  tls_key: key.pem
  tls_client_ca: ca.pem
rules: []
`))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Server; s.IdleTimeout != 5*time.Second || s.ClientBodyTimeout != 2*time.Second || s.SendTimeout != 3*time.Second ||
		s.MaxConnections != 64 || s.ClientBodyMinRate != 0 || s.ClientBodyRateGrace != 10*time.Second || strings.Join(s.AdminHosts, ",") != "sluice-admin.internal,ops.example.net" ||
		s.Listen != ":8080" || s.Upstream != "http://127.0.0.1:8081" || s.Admin != "127.0.0.1:9090" || s.UsageListen != "0.0.0.0:8090" || s.ThrottledPerRule != 0 ||
		s.AdminTokenFile != filepath.Join("secrets", "token") || s.TLSCert != "/etc/sluice/cert.pem" || s.TLSKey != "key.pem" || s.TLSClientCA != "ca.pem" {
		t.Errorf("server %+v", s)
	}
	for _, c := range []struct{ file, want string }{
		{"server: {idle_timeout: 0s}\n", "g.yaml:1: server.idle_timeout: want a duration from 1ms to 24h, got 0s"},
		{"server: {client_body_timeout: -1s}\n", "g.yaml:1: server.client_body_timeout: want a duration from 1ms to 24h, got -1s"},
		{"server: {idle_timeout: 500us}\n", "g.yaml:1: server.idle_timeout: want a duration from 1ms to 24h, got 500µs"},
		{"server: {send_timeout: 48h}\n", "g.yaml:1: server.send_timeout: want a duration from 1ms to 24h, got 48h0m0s"},
		{"server: {send_timeout: soon}\n", `g.yaml:1: server.send_timeout: want a duration such as 1m or 500ms, got "soon"`},
		{"server: {client_body_min_rate: -1}\n", "g.yaml:1: server.client_body_min_rate: want 0 (off) to 1073741824 bytes a second, got -1"},
		{"server: {client_body_rate_grace: 0s}\n", "g.yaml:1: server.client_body_rate_grace: want a duration from 1ms to 24h, got 0s"},
		{"server: {max_connections: 0}\n", "g.yaml:1: server.max_connections: want 1 to 1048576 connections, got 0"},
		{"server: {admin_hosts: [ok, \"evil:80\"]}\n", "g.yaml:1: server.admin_hosts[1]: want a host name"},
		{"server: {admin_hosts: x}\n", "g.yaml:1: server.admin_hosts: want a list of host names"},
		{"server: {keepalive: 1s}\n", "g.yaml:1: server.keepalive: unknown key"},
		{"server: {listen: 8080}\n", `g.yaml:1: server.listen: want host:port, or :port for every address, got "8080"`},
		{"server: {admin: [a]}\n", "g.yaml:1: server.admin: want a string"},
		{"server: {usage_listen: \"localhost\"}\n", `g.yaml:1: server.usage_listen: want host:port, or :port for every address, got "localhost"`},
		{"server: {upstream: 127.0.0.1:8081}\n", `g.yaml:1: server.upstream: want an http or https URL such as http://127.0.0.1:8081, got "127.0.0.1:8081"`},
		{"server: {upstream: \"ftp://x\"}\n", `g.yaml:1: server.upstream: want an http or https URL`},
		{"server: {throttled_per_rule: -1}\n", "g.yaml:1: server.throttled_per_rule: want 0 (off) to 65536 callers, got -1"},
		{"server: {throttled_per_rule: 100000}\n", "g.yaml:1: server.throttled_per_rule: want 0 (off) to 65536 callers, got 100000"},
	} {
		if _, err := config.Parse("g.yaml", []byte(c.file+"rules: []\n")); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.file, err, c.want)
		}
	}
}
