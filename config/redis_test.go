package config_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/config"
)

// The defaults a parsed Config holds are the Redis store's own.
func TestRedisDefaultsAreTheStores(t *testing.T) {
	if config.DefaultRedisTimeout != redis.DefaultTimeout || config.DefaultRedisKeyPrefix != redis.DefaultKeyPrefix {
		t.Errorf("config's Redis defaults (%v, %q) differ from backend/redis' (%v, %q)",
			config.DefaultRedisTimeout, config.DefaultRedisKeyPrefix, redis.DefaultTimeout, redis.DefaultKeyPrefix)
	}
}

// redisConfig is a configuration whose store section is section (indented
// under "store:").
func redisConfig(section string) string {
	return "store:\n" + section + "\non_store_error: local\nrules: []\n"
}

func TestParseRedisStore(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	if err := os.WriteFile(pwFile, []byte("from-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	caFile := writeCA(t, dir)
	t.Setenv("SLUICE_TEST_REDIS_PASSWORD", "from-the-env")

	for _, c := range []struct {
		name, section string
		want          config.Redis
	}{
		{"minimal", "  backend: redis\n  redis:\n    addrs: [127.0.0.1:6379]",
			config.Redis{Addrs: []string{"127.0.0.1:6379"}, Timeout: config.DefaultRedisTimeout, KeyPrefix: "sluice:", FleetSize: 1}},
		{"every field", `  backend: redis
  redis:
    addrs: [10.0.0.1:6379, "redis.internal:7000", "[::1]:6380"]
    username: gateway
    password: s3cret
    tls: true
    timeout: 20ms
    key_prefix: "orders-api:"
    fleet_size: 3
    auto_pipeline: true`,
			config.Redis{Addrs: []string{"10.0.0.1:6379", "redis.internal:7000", "[::1]:6380"}, Username: "gateway", Password: "s3cret",
				TLS: config.RedisTLS{Enabled: true}, Timeout: 20 * time.Millisecond, KeyPrefix: "orders-api:", FleetSize: 3, AutoPipeline: true}},
		{"sentinel", "  backend: redis\n  redis: {addrs: [10.0.0.1:26379, 10.0.0.2:26379], master_name: mymaster, db: 1}",
			config.Redis{Addrs: []string{"10.0.0.1:26379", "10.0.0.2:26379"}, MasterName: "mymaster", DB: 1, Timeout: config.DefaultRedisTimeout, KeyPrefix: "sluice:", FleetSize: 1}},
		{"db", "  backend: redis\n  redis: {addrs: [127.0.0.1:6379], db: 2}",
			config.Redis{Addrs: []string{"127.0.0.1:6379"}, DB: 2, Timeout: config.DefaultRedisTimeout, KeyPrefix: "sluice:", FleetSize: 1}},
		{"password_file", "  backend: redis\n  redis: {addrs: [127.0.0.1:6379], password_file: " + pwFile + "}",
			config.Redis{Addrs: []string{"127.0.0.1:6379"}, Password: "from-a-file", Timeout: config.DefaultRedisTimeout, KeyPrefix: "sluice:", FleetSize: 1}},
		{"password_env", "  backend: redis\n  redis: {addrs: [127.0.0.1:6379], password_env: SLUICE_TEST_REDIS_PASSWORD}",
			config.Redis{Addrs: []string{"127.0.0.1:6379"}, Password: "from-the-env", Timeout: config.DefaultRedisTimeout, KeyPrefix: "sluice:", FleetSize: 1}},
		{"tls false", "  backend: redis\n  redis: {addrs: [127.0.0.1:6379], tls: false}",
			config.Redis{Addrs: []string{"127.0.0.1:6379"}, Timeout: config.DefaultRedisTimeout, KeyPrefix: "sluice:", FleetSize: 1}},
		{"breaker off", "  backend: redis\n  redis: {addrs: [127.0.0.1:6379], breaker: off}",
			config.Redis{Addrs: []string{"127.0.0.1:6379"}, Timeout: config.DefaultRedisTimeout, KeyPrefix: "sluice:", FleetSize: 1, Breaker: config.RedisBreaker{Off: true}}},
		{"breaker false", "  backend: redis\n  redis: {addrs: [127.0.0.1:6379], breaker: false}",
			config.Redis{Addrs: []string{"127.0.0.1:6379"}, Timeout: config.DefaultRedisTimeout, KeyPrefix: "sluice:", FleetSize: 1, Breaker: config.RedisBreaker{Off: true}}},
		{"breaker on", "  backend: redis\n  redis: {addrs: [127.0.0.1:6379], breaker: true}",
			config.Redis{Addrs: []string{"127.0.0.1:6379"}, Timeout: config.DefaultRedisTimeout, KeyPrefix: "sluice:", FleetSize: 1}},
		{"breaker tuned", "  backend: redis\n  redis:\n    addrs: [127.0.0.1:6379]\n    breaker: {window: 2s, min_calls: 50, failure_rate: 0.8}",
			config.Redis{Addrs: []string{"127.0.0.1:6379"}, Timeout: config.DefaultRedisTimeout, KeyPrefix: "sluice:", FleetSize: 1,
				Breaker: config.RedisBreaker{Window: 2 * time.Second, MinCalls: 50, FailureRate: 0.8}}},
		{"breaker partly tuned", "  backend: redis\n  redis: {addrs: [127.0.0.1:6379], breaker: {min_calls: 5}}",
			config.Redis{Addrs: []string{"127.0.0.1:6379"}, Timeout: config.DefaultRedisTimeout, KeyPrefix: "sluice:", FleetSize: 1, Breaker: config.RedisBreaker{MinCalls: 5}}},
		{"tls mapping", "  backend: redis\n  redis:\n    addrs: [127.0.0.1:6379]\n    tls: {ca_file: " + caFile + ", server_name: redis.internal, insecure_skip_verify: false}",
			config.Redis{Addrs: []string{"127.0.0.1:6379"}, TLS: config.RedisTLS{Enabled: true, CAFile: caFile, ServerName: "redis.internal"},
				Timeout: config.DefaultRedisTimeout, KeyPrefix: "sluice:", FleetSize: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parseAndRead("fleet.yaml", []byte(redisConfig(c.section)))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Store.Backend != config.BackendRedis || cfg.OnStoreError != sluice.FailLocal {
				t.Errorf("backend %q, on_store_error %q; want redis, local", cfg.Store.Backend, cfg.OnStoreError)
			}
			want := config.Store{Backend: config.BackendRedis, Durability: cfg.Store.Durability, FlushInterval: cfg.Store.FlushInterval, Redis: c.want}
			if !cfg.Store.Equal(want) {
				t.Errorf("redis section\n got %+v\nwant %+v", cfg.Store.Redis, c.want)
			}
			tc, err := cfg.Store.Redis.TLS.Config()
			if err != nil {
				t.Fatal(err)
			}
			if (tc != nil) != c.want.TLS.Enabled {
				t.Errorf("TLS.Config() = %v, want one only when enabled", tc)
			}
			if tc != nil && c.want.TLS.CAFile != "" && (tc.RootCAs == nil || tc.ServerName != "redis.internal") {
				t.Errorf("TLS.Config() = %+v, want the CA file's roots and the server name", tc)
			}
			// The password never reaches a log line.
			if p := cfg.Store.Redis.Password; p != "" && strings.Contains(cfg.Store.String(), p) {
				t.Errorf("Store.String() = %s shows the password", cfg.Store.String())
			}
			if p := cfg.Store.Redis.Password; p != "" && strings.Contains(fmt.Sprintf("%+v %v", cfg.Store, cfg.Store), p) {
				t.Errorf("Store printed with %%+v shows the password")
			}
		})
	}
}

func TestBadRedisStores(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	os.Unsetenv("SLUICE_TEST_UNSET")
	for _, c := range []struct{ name, section, want string }{
		{"no addrs", "  backend: redis",
			"fleet.yaml:2: store.redis.addrs: required for the redis backend: one host:port, or several for a Cluster"},
		{"no addrs in the section", "  backend: redis\n  redis: {username: u}",
			"fleet.yaml:2: store.redis.addrs: required for the redis backend: one host:port, or several for a Cluster"},
		{"empty addrs", "  backend: redis\n  redis: {addrs: []}",
			"fleet.yaml:3: store.redis.addrs: must list at least one host:port"},
		{"addrs a string", "  backend: redis\n  redis: {addrs: 127.0.0.1:6379}",
			"fleet.yaml:3: store.redis.addrs: want a list of host:port, such as [127.0.0.1:6379]"},
		{"addrs a mapping", "  backend: redis\n  redis: {addrs: {a: b}}",
			"fleet.yaml:3: store.redis.addrs: want a list of host:port, got a mapping"},
		{"no port", "  backend: redis\n  redis: {addrs: [127.0.0.1]}",
			`fleet.yaml:3: store.redis.addrs[0]: want host:port, such as 127.0.0.1:6379, got "127.0.0.1": missing port in address`},
		{"bad port", "  backend: redis\n  redis:\n    addrs: [127.0.0.1:6379, redis:http]",
			`fleet.yaml:4: store.redis.addrs[1]: want host:port, such as 127.0.0.1:6379, got "redis:http": the port must be a number from 1 to 65535`},
		{"no host", "  backend: redis\n  redis: {addrs: [\":6379\"]}",
			`fleet.yaml:3: store.redis.addrs[0]: want host:port, such as 127.0.0.1:6379, got ":6379": no host`},
		{"addr twice", "  backend: redis\n  redis: {addrs: [a:1, a:1]}",
			"fleet.yaml:3: store.redis.addrs[1]: a:1 is store.redis.addrs[0] already"},
		{"addr not a string", "  backend: redis\n  redis: {addrs: [[a:1]]}",
			"fleet.yaml:3: store.redis.addrs[0]: want a string, got a list"},
		{"unknown key", "  backend: redis\n  redis: {addrs: [a:1], adress: b}",
			"fleet.yaml:3: store.redis.adress: unknown key"},
		{"two passwords", "  backend: redis\n  redis:\n    addrs: [a:1]\n    password: x\n    password_file: /etc/p",
			"fleet.yaml:6: store.redis.password_file: give one of password, password_file and password_env, not password and password_file"},
		{"unreadable password file", "  backend: redis\n  redis: {addrs: [a:1], password_file: " + missing + "}",
			"fleet.yaml:3: store.redis.password_file: cannot read the password: open " + missing + ": no such file or directory"},
		{"unset password env", "  backend: redis\n  redis: {addrs: [a:1], password_env: SLUICE_TEST_UNSET}",
			"fleet.yaml:3: store.redis.password_env: the environment variable SLUICE_TEST_UNSET is not set"},
		{"password not a string", "  backend: redis\n  redis: {addrs: [a:1], password: [x]}",
			"fleet.yaml:3: store.redis.password: want a string, got a list"},
		{"negative db", "  backend: redis\n  redis: {addrs: [a:1], db: -1}",
			"fleet.yaml:3: store.redis.db: want a database number from 0, got -1"},
		{"db not a number", "  backend: redis\n  redis: {addrs: [a:1], db: one}",
			`fleet.yaml:3: store.redis.db: want an integer, got "one"`},
		{"db on a cluster", "  backend: redis\n  redis:\n    addrs: [a:1, b:1]\n    db: 3",
			"fleet.yaml:5: store.redis.db: a Cluster (several addrs) has database 0 only, got 3"},
		{"empty master name", "  backend: redis\n  redis: {addrs: [a:1], master_name: \"\"}",
			"fleet.yaml:3: store.redis.master_name: must not be empty (leave it out for no Sentinel)"},
		{"tls a string", "  backend: redis\n  redis: {addrs: [a:1], tls: yes please}",
			`fleet.yaml:3: store.redis.tls: want true, false or a mapping of ca_file, server_name and insecure_skip_verify, got "yes please"`},
		{"tls unknown key", "  backend: redis\n  redis: {addrs: [a:1], tls: {ca: x}}",
			"fleet.yaml:3: store.redis.tls.ca: unknown key"},
		{"tls missing ca file", "  backend: redis\n  redis: {addrs: [a:1], tls: {ca_file: " + missing + "}}",
			"fleet.yaml:3: store.redis.tls.ca_file: open " + missing + ": no such file or directory"},
		{"tls ca file not PEM", "  backend: redis\n  redis: {addrs: [a:1], tls: {ca_file: " + notPEM + "}}",
			"fleet.yaml:3: store.redis.tls.ca_file: " + notPEM + " holds no PEM certificate"},
		{"tls insecure not a bool", "  backend: redis\n  redis: {addrs: [a:1], tls: {insecure_skip_verify: 1}}",
			"fleet.yaml:3: store.redis.tls.insecure_skip_verify: want true or false, got the integer 1"},
		{"timeout not a duration", "  backend: redis\n  redis: {addrs: [a:1], timeout: 5}",
			`fleet.yaml:3: store.redis.timeout: want a duration such as 1m or 500ms, got "5"`},
		{"zero timeout", "  backend: redis\n  redis: {addrs: [a:1], timeout: 0s}",
			"fleet.yaml:3: store.redis.timeout: must be positive, got 0s"},
		{"empty key prefix", "  backend: redis\n  redis: {addrs: [a:1], key_prefix: \"\"}",
			`fleet.yaml:3: store.redis.key_prefix: must not be empty (leave it out for "sluice:")`},
		{"auto_pipeline not a boolean", "  backend: redis\n  redis: {addrs: [a:1], auto_pipeline: sometimes}",
			`fleet.yaml:3: store.redis.auto_pipeline: want true or false, got "sometimes"`},
		{"breaker a word", "  backend: redis\n  redis: {addrs: [a:1], breaker: sometimes}",
			`fleet.yaml:3: store.redis.breaker: want off, on, or a mapping of window, min_calls and failure_rate, got "sometimes"`},
		{"breaker window too short", "  backend: redis\n  redis: {addrs: [a:1], breaker: {window: 5ms}}",
			"fleet.yaml:3: store.redis.breaker.window: must be at least 10ms, got 5ms"},
		{"breaker min_calls zero", "  backend: redis\n  redis: {addrs: [a:1], breaker: {min_calls: 0}}",
			"fleet.yaml:3: store.redis.breaker.min_calls: want 1 or more calls, got 0 (breaker: off turns the breaker off)"},
		{"breaker rate above 1", "  backend: redis\n  redis: {addrs: [a:1], breaker: {failure_rate: 1.5}}",
			"fleet.yaml:3: store.redis.breaker.failure_rate: want a share above 0 and at most 1, such as 0.5, got 1.5"},
		{"breaker rate a word", "  backend: redis\n  redis: {addrs: [a:1], breaker: {failure_rate: half}}",
			`fleet.yaml:3: store.redis.breaker.failure_rate: want a number such as 0.5, got "half"`},
		{"breaker unknown key", "  backend: redis\n  redis: {addrs: [a:1], breaker: {cooldown: 1s}}",
			"fleet.yaml:3: store.redis.breaker.cooldown: unknown key"},
		{"zero fleet", "  backend: redis\n  redis: {addrs: [a:1], fleet_size: 0}",
			"fleet.yaml:3: store.redis.fleet_size: want the number of gateways sharing the store, 1 or more, got 0"},
		{"fleet not a number", "  backend: redis\n  redis: {addrs: [a:1], fleet_size: three}",
			`fleet.yaml:3: store.redis.fleet_size: want an integer, got "three"`},
		{"redis not a mapping", "  backend: redis\n  redis: 127.0.0.1:6379",
			`fleet.yaml:3: store.redis: want a mapping, got "127.0.0.1:6379"`},
		{"redis section without the backend", "  redis: {addrs: [a:1]}",
			"fleet.yaml:2: store.redis: only for the redis backend, but store.backend is memory (set backend: redis)"},
		{"redis section under pebble", "  backend: pebble\n  dir: /tmp/x\n  redis: {addrs: [a:1]}",
			"fleet.yaml:4: store.redis: only for the redis backend, but store.backend is pebble (set backend: redis)"},
		{"dir with redis", "  backend: redis\n  dir: /tmp/x\n  redis: {addrs: [a:1]}",
			"fleet.yaml:3: store.dir: not used by the redis backend (it applies to pebble and bolt)"},
		{"durability with redis", "  backend: redis\n  durability: sync\n  redis: {addrs: [a:1]}",
			"fleet.yaml:3: store.durability: not used by the redis backend (it applies to pebble and bolt)"},
		{"flush interval with redis", "  backend: redis\n  flush_interval: 1s\n  redis: {addrs: [a:1]}",
			"fleet.yaml:3: store.flush_interval: not used by the redis backend (it applies to pebble and bolt)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseAndRead("fleet.yaml", []byte(redisConfig(c.section)))
			if err == nil {
				t.Fatal("Parse and ReadReferences = nil error, want one")
			}
			var ce *config.Error
			if !errors.As(err, &ce) || !errors.Is(err, sluice.ErrInvalidConfig) {
				t.Errorf("error %T %v, want a *config.Error matching ErrInvalidConfig", err, err)
			}
			if err.Error() != c.want {
				t.Errorf("error\n got %s\nwant %s", err, c.want)
			}
		})
	}
}

// parseAndRead parses a configuration and reads what it names, as Load
// does with a file's bytes.
func parseAndRead(name string, data []byte) (*config.Config, error) {
	c, err := config.Parse(name, data)
	if err != nil {
		return nil, err
	}
	if err := c.ReadReferences(); err != nil {
		return nil, err
	}
	return c, nil
}

// Parse reads no file and no environment variable: a password file, a
// password variable and a CA file are named, and read by ReadReferences,
// whose errors name the line and the field of each; once it has read them,
// calling it again reads nothing.
func TestParseReadsNothing(t *testing.T) {
	dir := t.TempDir()
	pw, missing := filepath.Join(dir, "password"), filepath.Join(dir, "missing")
	ca := writeCA(t, dir)
	os.Unsetenv("SLUICE_TEST_UNSET")
	for _, c := range []struct{ section, want string }{
		{"  backend: redis\n  redis: {addrs: [a:1], password_file: " + missing + "}",
			"fleet.yaml:3: store.redis.password_file: cannot read the password: open " + missing + ": no such file or directory"},
		{"  backend: redis\n  redis:\n    addrs: [a:1]\n    password_env: SLUICE_TEST_UNSET",
			"fleet.yaml:5: store.redis.password_env: the environment variable SLUICE_TEST_UNSET is not set"},
		{"  backend: redis\n  redis:\n    addrs: [a:1]\n    tls:\n      server_name: r\n      ca_file: " + missing,
			"fleet.yaml:7: store.redis.tls.ca_file: open " + missing + ": no such file or directory"},
	} {
		cfg, err := config.Parse("fleet.yaml", []byte(redisConfig(c.section)))
		if err != nil {
			t.Fatalf("Parse read what the file names: %v", err)
		}
		if cfg.Store.Redis.Password != "" {
			t.Errorf("Parse set the password %q", cfg.Store.Redis.Password)
		}
		err = cfg.ReadReferences()
		var ce *config.Error
		if err == nil || err.Error() != c.want || !errors.As(err, &ce) || !errors.Is(err, sluice.ErrInvalidConfig) {
			t.Errorf("ReadReferences = %v, want the *config.Error %s", err, c.want)
		}
	}
	if err := os.WriteFile(pw, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("fleet.yaml", []byte(redisConfig("  backend: redis\n  redis: {addrs: [a:1], password_file: "+pw+", tls: {ca_file: "+ca+"}}")))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.ReadReferences(); err != nil || cfg.Store.Redis.Password != "first" {
		t.Fatalf("ReadReferences = %v, password %q; want first", err, cfg.Store.Redis.Password)
	}
	if tc, err := cfg.Store.Redis.TLS.Config(); err != nil || tc.RootCAs == nil {
		t.Errorf("TLS.Config() = %v, %v; want the CA file's roots", tc, err)
	}
	os.Remove(pw)
	os.Remove(ca)
	if err := cfg.ReadReferences(); err != nil || cfg.Store.Redis.Password != "first" {
		t.Errorf("ReadReferences again = %v, password %q; want nothing read again", err, cfg.Store.Redis.Password)
	}
	if tc, err := cfg.Store.Redis.TLS.Config(); err != nil || tc.RootCAs == nil {
		t.Errorf("TLS.Config() after the CA file went = %v, %v; want the roots read before", tc, err)
	}
}

// on_store_error local needs no redis section: the fleet is then one.
func TestLocalPolicyWithoutRedis(t *testing.T) {
	cfg, err := config.Parse("x.yaml", []byte("on_store_error: local\nrules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OnStoreError != sluice.FailLocal || cfg.Store.Redis.FleetSize != 1 {
		t.Errorf("on_store_error %q, fleet size %d; want local, 1", cfg.OnStoreError, cfg.Store.Redis.FleetSize)
	}
}

// Equal compares every field, the addresses included.
func TestStoreEqual(t *testing.T) {
	a := config.Store{Backend: config.BackendRedis, Redis: config.Redis{Addrs: []string{"a:1", "b:1"}, FleetSize: 3}}
	b := a
	b.Redis.Addrs = []string{"a:1", "b:1"}
	if !a.Equal(b) {
		t.Error("equal stores compare unequal")
	}
	for _, change := range []func(*config.Store){
		func(s *config.Store) { s.Redis.Addrs = []string{"a:1"} },
		func(s *config.Store) { s.Redis.Password = "x" },
		func(s *config.Store) { s.Redis.FleetSize = 4 },
		func(s *config.Store) { s.Redis.TLS.Enabled = true },
		func(s *config.Store) { s.Backend = config.BackendMemory },
	} {
		c := a
		c.Redis.Addrs = slicesClone(a.Redis.Addrs)
		change(&c)
		if a.Equal(c) {
			t.Errorf("%+v and %+v compare equal", a.Redis, c.Redis)
		}
	}
	if !reflect.DeepEqual(config.Backends, []string{"memory", "pebble", "bolt", "redis"}) {
		t.Errorf("Backends = %v", config.Backends)
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// writeCA writes a self-signed CA certificate in PEM to dir and returns
// its path.
func writeCA(t *testing.T, dir string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// ParseRedisBreaker reads what --redis-breaker takes, and String writes it
// back.
func TestParseRedisBreaker(t *testing.T) {
	for _, c := range []struct {
		in, want, err string
	}{
		{in: "off", want: "off"},
		{in: "default", want: "default"},
		{in: "window=2s,min_calls=50,failure_rate=0.8", want: "window=2s,min_calls=50,failure_rate=0.8"},
		{in: "min_calls=5", want: "min_calls=5"},
		{in: "window=5ms", err: "window: must be at least 10ms, got 5ms"},
		{in: "min_calls=0", err: "min_calls: want 1 or more calls, got 0"},
		{in: "failure_rate=0", err: "failure_rate: want a share above 0 and at most 1"},
		{in: "failure_rate=x", err: `failure_rate: want a number such as 0.5, got "x"`},
		{in: "window=1s,window=2s", err: "window given twice"},
		{in: "cooldown=1s", err: `unknown setting "cooldown"`},
		{in: "sometimes", err: `want off, default, or window=DURATION,min_calls=N,failure_rate=R; got "sometimes"`},
	} {
		b, err := config.ParseRedisBreaker(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseRedisBreaker(%q) = %v, %v; want the error %q", c.in, b, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("ParseRedisBreaker(%q): %v", c.in, err)
		case c.err == "" && b.String() != c.want:
			t.Errorf("ParseRedisBreaker(%q).String() = %q, want %q", c.in, b, c.want)
		}
	}
}

// LoadStore reads the store section of a gateway configuration or of a
// file holding it alone, checked as Parse checks it.
func TestLoadStore(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	alone := write("store.yaml", "store:\n  backend: redis\n  redis: {addrs: [127.0.0.1:6379], timeout: 20ms, breaker: off}\n")
	s, err := config.LoadStore(alone)
	if err != nil {
		t.Fatal(err)
	}
	if s.Backend != config.BackendRedis || s.Redis.Timeout != 20*time.Millisecond || !s.Redis.Breaker.Off || s.Redis.KeyPrefix != "sluice:" {
		t.Errorf("LoadStore(store alone) = %v", s)
	}
	gateway := write("gateway.yaml", "on_store_error: closed\nrules:\n  - {name: r, algorithm: gcra, limit: 1, window: 1s}\nstore:\n  backend: pebble\n  dir: /var/lib/sluice\n")
	if s, err = config.LoadStore(gateway); err != nil || s.Backend != config.BackendPebble || s.Dir != "/var/lib/sluice" {
		t.Errorf("LoadStore(a gateway's file) = %v, %v", s, err)
	}
	for _, c := range []struct{ body, want string }{
		{"on_store_error: closed\n", "bad.yaml:1: store: the file has no store section"},
		{"stor:\n  backend: memory\n", "bad.yaml:1: stor: unknown key"},
		{"store:\n  backend: redis\n", "bad.yaml:2: store.redis.addrs: required for the redis backend"},
		{"", "bad.yaml: the configuration is empty"},
	} {
		_, err := config.LoadStore(write("bad.yaml", c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("LoadStore(%q) = %v, want %q", c.body, err, c.want)
		}
	}
}

// Relative paths in a file — a durable store's dir, password_file,
// tls.ca_file — are relative to the file's own directory, whatever the
// working directory of the command reading it.
func TestRelativePathsFollowTheFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "password"), []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Base(writeCA(t, dir))
	redisFile := filepath.Join(dir, "fleet.yaml")
	os.WriteFile(redisFile, []byte(redisConfig("  backend: redis\n  redis:\n    addrs: [a:1]\n    password_file: password\n    tls: {ca_file: "+ca+"}")), 0o644)
	pebbleFile := filepath.Join(dir, "gateway.yaml")
	os.WriteFile(pebbleFile, []byte("store:\n  backend: pebble\n  dir: state\nrules: []\n"), 0o644)

	elsewhere := t.TempDir()
	t.Chdir(elsewhere)
	c, err := config.Load(redisFile)
	if err != nil {
		t.Fatalf("Load from another directory: %v", err)
	}
	if c.Store.Redis.Password != "pw" || c.Store.Redis.TLS.CAFile != filepath.Join(dir, ca) {
		t.Errorf("password %q, ca_file %q: want them read beside the file", c.Store.Redis.Password, c.Store.Redis.TLS.CAFile)
	}
	if c, err = config.Load(pebbleFile); err != nil || c.Store.Dir != filepath.Join(dir, "state") {
		t.Errorf("dir: %q, %v; want %s", c.Store.Dir, err, filepath.Join(dir, "state"))
	}
}

// A trusted proxy prefix of every address lets every client pick its key.
func TestTrustEveryoneRefused(t *testing.T) {
	for _, p := range []string{"0.0.0.0/0", "::/0"} {
		_, err := config.Parse("g.yaml", []byte("identity:\n  trusted_proxies: [10.0.0.1, \""+p+"\"]\nrules: []\n"))
		if err == nil || !strings.Contains(err.Error(), "g.yaml:2: identity.trusted_proxies[1]: "+p+" trusts every peer") {
			t.Errorf("trusted_proxies %s: %v", p, err)
		}
	}
}
