package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// NEAR_LIMIT_RATIO from envoyproxy/ratelimit's environment sets the
// near-limit metric's threshold (as its checkNearLimitThreshold: allowed
// hits past floor(limit × ratio)); --near-limit-ratio goes over it.
func TestRLSProcessNearLimitRatio(t *testing.T) {
	t.Parallel()
	waitAwayFromDayBoundary(t)
	cfg := filepath.Join(t.TempDir(), "near.yaml")
	writeFile(t, cfg, "domain: near\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 10}\n")
	series := `sluice_rls_near_limit_total{descriptor="k",domain="near"}`
	for _, c := range []struct {
		env  []string
		args []string
		want float64
	}{
		{nil, nil, 2}, // 0.8: hits 9 and 10
		{[]string{"NEAR_LIMIT_RATIO=0.5"}, nil, 5},
		{[]string{"NEAR_LIMIT_RATIO=0.5"}, []string{"--near-limit-ratio", "0.3"}, 7},
		{[]string{"NEAR_LIMIT_RATIO=1"}, nil, 0},
	} {
		p := startRLSEnv(t, c.env, append([]string{"--config", cfg}, c.args...)...)
		for range 10 {
			p.ask(t, "near", 1, rd("k", "v"))
		}
		if got := metricValue(t, p.admin, series); got != c.want {
			t.Errorf("%v %v: %s = %v after 10 hits of 10, want %v", c.env, c.args, series, got, c.want)
		}
	}
	if code, _, stderr := runCmd(t, "", "rls", "--config", cfg, "--grpc", "127.0.0.1:0", "--near-limit-ratio", "0"); code != 2 ||
		!strings.Contains(stderr, "--near-limit-ratio 0: want a share of the limit in (0, 1]") {
		t.Errorf("--near-limit-ratio 0: exit %d\n%s", code, stderr)
	}
}

// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: sluice rls never spends on a
// refusal. Unset in a deployment of envoyproxy/ratelimit's (another of its
// settings set), or false (its default, under which a refused request's
// hits count), one line at start says this differs; true, or unset with
// none of its settings (a start of rls's own), nothing is said.
func TestRLSProcessStopCacheKeyIncrementNote(t *testing.T) {
	t.Parallel()
	const note = "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT "
	for _, c := range []struct {
		env   []string
		lines int
		says  string
	}{
		{nil, 0, ""},
		{[]string{"USE_STATSD=false"}, 1, "unset (false, envoyproxy/ratelimit's default): a difference"},
		{[]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false"}, 1, "=false: a difference"},
		{[]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"}, 0, ""},
	} {
		// Whatever of envoyproxy/ratelimit's settings the test's own
		// environment holds is blanked first.
		names, err := os.ReadFile("testdata/rls/settings-env.txt")
		if err != nil {
			t.Fatal(err)
		}
		var env []string
		for _, n := range strings.Fields(string(names)) {
			env = append(env, n+"=")
		}
		p := startRLSEnv(t, append(env, c.env...), "--config", "testdata/rls/sluice")
		log := p.stderr.String()
		if n := strings.Count(log, note); n != c.lines || !strings.Contains(log, c.says) {
			t.Errorf("%v: %d lines of the note, want %d saying %q:\n%s", c.env, n, c.lines, c.says, log)
		}
	}
}

// Every environment variable of envoyproxy/ratelimit's settings.go at the
// pinned commit (testdata/rls/settings-env.txt; SOURCE.md) is in
// docs/rls.md's migration table, and readRLSEnv asks for each: read,
// mapped, refused or noted, never silently dropped.
func TestRLSEnvEveryEnvoySetting(t *testing.T) {
	b, err := os.ReadFile("testdata/rls/settings-env.txt")
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(string(b))
	if len(names) < 100 {
		t.Fatalf("settings-env.txt holds %d names, want settings.go's 108", len(names))
	}
	doc, err := os.ReadFile("../../docs/rls.md")
	if err != nil {
		t.Fatal(err)
	}
	var table []string
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "| `") {
			table = append(table, strings.SplitN(l, " | ", 2)[0])
		}
	}
	rows := strings.Join(table, "\n")
	// The settings that lead to others: xDS, Redis from REDIS_URL, TLS.
	gates := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "RUNTIME_ROOT": "/srv/runtime_data/current", "REDIS_URL": "127.0.0.1:6379", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TLS": "true", "GRPC_SERVER_USE_TLS": "true",
		"GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem"}
	asked := map[string]bool{}
	if _, err := readRLSEnv(func(name string) string { asked[name] = true; return gates[name] }); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !strings.Contains(rows, "`"+n+"`") && !strings.Contains(rows, "`"+n+"=") {
			t.Errorf("%s: not in the migration table of docs/rls.md", n)
		}
		if !asked[n] {
			t.Errorf("%s: readRLSEnv never reads it (read, refuse or note it)", n)
		}
	}
	// What each refused setting says names it (a password's value
	// excepted) and what to use instead.
	for _, c := range []struct{ env, want string }{
		{"GRPC_UDS=/tmp/rl.sock", "--grpc HOST:PORT"},
		{"REDIS_TLS_CLIENT_CERT=c.pem", "REDIS_AUTH"},
		{"REDIS_TLS_CLIENT_KEY=k.pem", "REDIS_AUTH"},
		{"REDIS_SENTINEL_AUTH=pw", "REDIS_AUTH"},
		{"REDIS_TIMEOUT=soon", "--redis-timeout"},
		{"GRPC_CLIENT_TLS_SAN=envoy", "--tls-client-ca"},
	} {
		k, v, _ := strings.Cut(c.env, "=")
		env := map[string]string{k: v, "REDIS_URL": "127.0.0.1:6379", "REDIS_SOCKET_TYPE": "tcp", "GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem"}
		e, err := readRLSEnv(func(n string) string { return env[n] })
		if err == nil {
			err = e.redisErr // a REDIS_* setting: refused when REDIS_* are to give the store
		}
		if err == nil || !strings.Contains(err.Error(), k) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it refused naming %s", c.env, err, c.want)
		}
	}
	// Mapped: REDIS_TIMEOUT is the store's deadline; the gRPC TLS files.
	env := map[string]string{"REDIS_URL": "127.0.0.1:6379", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TIMEOUT": "250ms", "GRPC_SERVER_USE_TLS": "true",
		"GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem", "GRPC_CLIENT_TLS_CACERT": "ca.pem", "LOG_LEVEL": "debug"}
	e, err := readRLSEnv(func(n string) string { return env[n] })
	if err != nil || e.redis == nil || e.redis.Timeout != 250*time.Millisecond || e.tls != [3]string{"c.pem", "k.pem", "ca.pem"} {
		t.Errorf("REDIS_TIMEOUT and GRPC_SERVER_TLS_*: %+v %v", e, err)
	}
	if !strings.Contains(strings.Join(e.notes, "\n"), "LOG_LEVEL is not read: ") {
		t.Errorf("LOG_LEVEL set: notes %q, want it named", e.notes)
	}
	// A feature of envoyproxy/ratelimit's turned off, as it is here, is
	// not noted; turned on, it is.
	for v, want := range map[string]bool{"false": false, "true": true} {
		env := map[string]string{"USE_STATSD": v, "TRACING_ENABLED": v}
		e, err := readRLSEnv(func(n string) string { return env[n] })
		notes := strings.Join(e.notes, "\n")
		if err != nil || strings.Contains(notes, "USE_STATSD") != want || strings.Contains(notes, "TRACING_ENABLED") != want {
			t.Errorf("USE_STATSD and TRACING_ENABLED=%s: notes %q, %v; want them noted: %v", v, e.notes, err, want)
		}
	}
}

// GRPC_SERVER_USE_TLS=true wants a certificate and key from the
// environment or from --tls-cert and --tls-key: either will do, and with
// neither rls says which to give before it starts.
func TestRLSEnvTLSFromFlags(t *testing.T) {
	t.Setenv("GRPC_SERVER_USE_TLS", "true")
	code, _, stderr := runCmd(t, "", "rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0")
	if code != 2 || !strings.Contains(stderr, "GRPC_SERVER_USE_TLS=true: give GRPC_SERVER_TLS_CERT") {
		t.Fatalf("no certificate anywhere: exit %d, %q; want 2 naming what to give", code, stderr)
	}
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "missing-cert.pem"), filepath.Join(dir, "missing-key.pem")
	code, _, stderr = runCmd(t, "", "rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key)
	if strings.Contains(stderr, "GRPC_SERVER_USE_TLS") || !strings.Contains(stderr, "missing-cert.pem") {
		t.Fatalf("the files by flag: exit %d, %q; want them taken (and their absence reported), not the environment's refusal", code, stderr)
	}
}

// The store flags beat envoyproxy/ratelimit's REDIS_* environment, as the
// migration table says: REDIS_URL with a REDIS_SOCKET_TYPE rls cannot use
// stops rls only when the environment is to give the store, and then says
// what is missing.
func TestRLSEnvRedisUnderTheFlags(t *testing.T) {
	t.Setenv("REDIS_URL", "127.0.0.1:1")
	code, _, stderr := runCmd(t, "", "rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0")
	if code != 2 || !strings.Contains(stderr, "REDIS_SOCKET_TYPE unset") || !strings.Contains(stderr, "--backend or --store") {
		t.Fatalf("REDIS_URL alone: exit %d, %q; want 2, naming REDIS_SOCKET_TYPE and the flags", code, stderr)
	}
	code, _, stderr = runCmd(t, "", "rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--backend", "memory", "--admin", "127.0.0.1:1", "--admin-token-file", "/nonexistent/token")
	if strings.Contains(stderr, "REDIS_") {
		t.Fatalf("--backend memory beside REDIS_URL: exit %d, %q; want the environment's store passed over", code, stderr)
	}
}

// Configured by envoyproxy/ratelimit's environment alone (RUNTIME_ROOT,
// no GRPC_HOST or GRPC_PORT, no --grpc), rls listens where it did: its
// default 0.0.0.0:8081. (Skipped, saying so, when another process holds
// that port on this machine.)
func TestRLSProcessDefaultGRPCFromTheEnvironment(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "rls", "integration", "config", "basic.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "basic.yaml"), string(b))
	cmd := exec.Command(buildBinary(t), "rls", "--admin", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config", "GRPC_HOST=", "GRPC_PORT=")
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { cmd.Process.Kill(); <-exited }()
	for deadline := time.Now().Add(processTimeout); !strings.Contains(stderr.String(), "listening"); {
		select {
		case err := <-exited:
			exited <- err // for the deferred reap, which would otherwise wait forever
			if strings.Contains(stderr.String(), "address already in use") {
				t.Skip("port 8081 is taken on this machine: " + stderr.String())
			}
			t.Fatalf("rls exited before listening:\n%s", stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("rls did not listen within %v:\n%s", processTimeout, stderr.String())
		}
	}
	if log := stderr.String(); !strings.Contains(log, "grpc=0.0.0.0:8081") && !strings.Contains(log, "grpc=[::]:8081") {
		t.Fatalf("the listening line does not name every address's port 8081:\n%s", log)
	}
}

// TestRLSEnvGRPCDefaults: the listener takes envoyproxy/ratelimit's
// defaults, 0.0.0.0 and 8081, for whichever of GRPC_HOST and GRPC_PORT is
// unset, and for a configuration the environment gives with neither; with
// nothing of the kind set, rls has no listener of the environment's.
func TestRLSEnvGRPCDefaults(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{}, ""},
		{map[string]string{"GRPC_PORT": "9000"}, "0.0.0.0:9000"},
		{map[string]string{"GRPC_HOST": "127.0.0.1"}, "127.0.0.1:8081"},
		{map[string]string{"GRPC_HOST": "::1", "GRPC_PORT": "9000"}, "[::1]:9000"},
		{map[string]string{"RUNTIME_ROOT": "/srv/runtime"}, "0.0.0.0:8081"},
	} {
		e, err := readRLSEnv(func(n string) string { return tt.env[n] })
		if err != nil || e.grpc != tt.want {
			t.Errorf("readRLSEnv(%v): grpc %q, %v; want %q", tt.env, e.grpc, err, tt.want)
		}
	}
	if _, err := readRLSEnv(func(n string) string { return map[string]string{"GRPC_PORT": "80x"}[n] }); err == nil || !strings.Contains(err.Error(), "GRPC_PORT=80x") {
		t.Errorf("GRPC_PORT=80x: err %v, want one naming it", err)
	}
}

// USE_CALENDAR_MONTH_RATE_LIMIT=true is read as --calendar-month.
func TestRLSEnvCalendarMonth(t *testing.T) {
	for v, want := range map[string]bool{"": false, "false": false, "true": true} {
		e, err := readRLSEnv(func(n string) string {
			if n == "USE_CALENDAR_MONTH_RATE_LIMIT" {
				return v
			}
			return ""
		})
		if err != nil || e.calendarMonth != want {
			t.Errorf("USE_CALENDAR_MONTH_RATE_LIMIT=%q: calendarMonth %v, %v; want %v", v, e.calendarMonth, err, want)
		}
	}
}
