package main

import (
	"cmp"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-go/sluice/config"
)

// rlsEnv is what `sluice rls` reads of envoyproxy/ratelimit's environment,
// so that a deployment's env block can stay as it is. Flags given on the
// command line go over it.
type rlsEnv struct {
	config        string        // RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY
	grpc          string        // GRPC_HOST:GRPC_PORT
	shadowMode    bool          // SHADOW_MODE
	quotaMode     bool          // QUOTA_MODE
	headers       bool          // LIMIT_RESPONSE_HEADERS_ENABLED
	merge         bool          // MERGE_DOMAIN_CONFIG
	calendarMonth bool          // USE_CALENDAR_MONTH_RATE_LIMIT
	metadata      bool          // RESPONSE_DYNAMIC_METADATA
	nearRatio     float64       // NEAR_LIMIT_RATIO; 0 if unset
	headerNames   [3]string     // LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER
	redis         *config.Redis // REDIS_*: the store, when neither --backend nor --store says it
	redisErr      error         // why REDIS_* give no store, said only if they are to give it
	xds           rlsXDSEnv     // CONFIG_TYPE=GRPC_XDS_SOTW and its CONFIG_GRPC_XDS_*
	tlsOn         bool          // GRPC_SERVER_USE_TLS=true
	tls           [3]string     // GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY, GRPC_CLIENT_TLS_CACERT, with GRPC_SERVER_USE_TLS=true
	notes         []string      // settings read that change nothing here, said at start
}

// readRLSEnv reads envoyproxy/ratelimit's settings from getenv. A setting
// Sluice cannot honour, and that would change the answers, is an error
// naming it and what to do instead; one that changes nothing here is a
// note. The migration table of docs/rls.md lists them all.
func readRLSEnv(getenv func(string) string) (rlsEnv, error) {
	var e rlsEnv
	// Whether any setting of envoyproxy/ratelimit's is set: the notes
	// that compare with its defaults are for a deployment moving from it,
	// not for every start.
	set := false
	read := getenv
	getenv = func(name string) string {
		v := read(name)
		if v != "" && name != "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT" {
			set = true
		}
		return v
	}
	isTrue := func(name string) (bool, error) { return parseEnvBool(name, getenv(name)) }
	if root := getenv("RUNTIME_ROOT"); root != "" {
		app := getenv("RUNTIME_APPDIRECTORY")
		if app == "" {
			app = "config"
		}
		e.config = filepath.Join(root, getenv("RUNTIME_SUBDIRECTORY"), app)
	}
	host, port := getenv("GRPC_HOST"), getenv("GRPC_PORT")
	if v := getenv("GRPC_UDS"); v != "" {
		return e, fmt.Errorf("GRPC_UDS=%s: sluice rls listens on TCP only: --grpc HOST:PORT (or GRPC_HOST and GRPC_PORT)", v)
	}
	tlsOn, err := isTrue("GRPC_SERVER_USE_TLS")
	if err != nil {
		return e, err
	}
	if tlsOn {
		// Whether a certificate and key are given, here or by --tls-cert
		// and --tls-key, is runRLS's to check once the flags are merged.
		e.tlsOn = true
		e.tls = [3]string{getenv("GRPC_SERVER_TLS_CERT"), getenv("GRPC_SERVER_TLS_KEY"), getenv("GRPC_CLIENT_TLS_CACERT")}
		if san := getenv("GRPC_CLIENT_TLS_SAN"); san != "" {
			return e, fmt.Errorf("GRPC_CLIENT_TLS_SAN=%s: sluice rls checks a client certificate against --tls-client-ca (GRPC_CLIENT_TLS_CACERT) only, not its SAN; sign the clients' certificates with a CA of their own", san)
		}
	}
	if e.shadowMode, err = isTrue("SHADOW_MODE"); err != nil {
		return e, err
	}
	if e.quotaMode, err = isTrue("QUOTA_MODE"); err != nil {
		return e, err
	}
	if e.headers, err = isTrue("LIMIT_RESPONSE_HEADERS_ENABLED"); err != nil {
		return e, err
	}
	for i, name := range []string{"LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER", "LIMIT_RESET_HEADER"} {
		e.headerNames[i] = getenv(name)
	}
	xe, notes, err := readXDSEnv(getenv)
	if err != nil {
		return e, err
	}
	e.xds, e.notes = xe, append(e.notes, notes...)
	if host != "" || port != "" || e.config != "" || e.xds.on {
		// The listener as envoyproxy/ratelimit's: GRPC_HOST 0.0.0.0 and
		// GRPC_PORT 8081 unless set, for a deployment it configures.
		host, port = cmp.Or(host, "0.0.0.0"), cmp.Or(port, "8081")
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return e, fmt.Errorf("GRPC_PORT=%s: want a port number", port)
		}
		e.grpc = net.JoinHostPort(host, port)
	}
	if e.merge, err = isTrue("MERGE_DOMAIN_CONFIG"); err != nil {
		return e, err
	}
	if e.metadata, err = isTrue("RESPONSE_DYNAMIC_METADATA"); err != nil {
		return e, err
	}
	for _, name := range []string{"REDIS_PERSECOND"} {
		on, err := isTrue(name)
		if err != nil {
			return e, err
		}
		if on {
			return e, fmt.Errorf("%s=true: not supported by sluice rls yet (see the migration table in docs/rls.md)", name)
		}
	}
	if e.calendarMonth, err = isTrue("USE_CALENDAR_MONTH_RATE_LIMIT"); err != nil {
		return e, err
	}
	if t := getenv("BACKEND_TYPE"); t != "" && !strings.EqualFold(t, "redis") {
		return e, fmt.Errorf("BACKEND_TYPE=%s: sluice rls keeps its budgets in memory, Pebble, bbolt or Redis (--backend, or --store)", t)
	}
	if v := getenv("NEAR_LIMIT_RATIO"); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || !(r > 0 && r <= 1) {
			return e, fmt.Errorf("NEAR_LIMIT_RATIO=%s: want a share of the limit in (0, 1], such as 0.8 (--near-limit-ratio)", v)
		}
		e.nearRatio = r
	}
	// Read, and the same here whatever it says: a refusal never spends.
	// Unset or false, envoyproxy/ratelimit would spend it, so say so.
	stopCache := getenv("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
	stopCacheOn, err := parseEnvBool("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", stopCache)
	if err != nil {
		return e, err
	}
	if getenv("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED") != "" {
		e.notes = append(e.notes, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: sluice rls serves only once a configuration has loaded, always")
	}
	if url := getenv("REDIS_URL"); url != "" {
		// The store from REDIS_*, or why it cannot be had: runRLS uses
		// either only when neither --backend nor --store gives the store.
		e.redis, e.redisErr = redisFromEnv(getenv, url)
	}
	for _, n := range rlsEnvNotes {
		for _, name := range n.names {
			v := getenv(name)
			if v == "" {
				continue
			}
			if off, err := strconv.ParseBool(v); err == nil && !off && (strings.HasPrefix(name, "USE_") || name == "TRACING_ENABLED") {
				continue // a feature turned off, as it is here: nothing to say
			}
			e.notes = append(e.notes, name+" is not read: "+n.note)
		}
	}
	if !stopCacheOn && (stopCache != "" || set) {
		// False, or unset in a deployment of envoyproxy/ratelimit's:
		// there a refused request would spend, as it never does here.
		e.notes = append(e.notes, stopCacheNote(stopCache))
	}
	return e, nil
}

// rlsEnvNotes are envoyproxy/ratelimit's settings that change no answer of
// sluice rls, each with what stands for it here; a setting given is named
// at start with its note. The migration table of docs/rls.md lists them.
var rlsEnvNotes = []struct {
	names []string
	note  string
}{
	{[]string{"HOST", "PORT", "DEBUG_HOST", "DEBUG_PORT"}, "the HTTP and debug listeners are --admin HOST:PORT (/healthz, /metrics, /config)"},
	{[]string{"GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE"}, "a connection is kept until Envoy closes it"},
	{[]string{"LOG_LEVEL", "LOG_FORMAT"}, "sluice rls logs at info, as key=value text, to stderr"},
	{[]string{"FORCE_START_WITHOUT_INITIAL_CONFIG"}, "from a control plane sluice rls always starts before the first push, answering UNAVAILABLE until it"},
	{[]string{"USE_STATSD", "USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS", "STATSD_HOST", "STATSD_PORT", "EXTRA_TAGS", "STATS_FLUSH_INTERVAL", "DISABLE_STATS",
		"USE_PROMETHEUS", "PROMETHEUS_ADDR", "PROMETHEUS_PATH", "PROMETHEUS_MAPPER_YAML"}, "statistics are Prometheus series on --admin's /metrics"},
	{[]string{"TRACING_ENABLED", "TRACING_SERVICE_NAME", "TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID", "TRACING_EXPORTER_PROTOCOL", "TRACING_SAMPLING_RATE"}, "sluice rls exports no traces"},
	{[]string{"RUNTIME_IGNOREDOTFILES"}, "files and directories whose names start with a dot are always skipped"},
	{[]string{"RUNTIME_WATCH_ROOT"}, "the configuration directory is watched, renames and symbolic-link swaps included"},
	{[]string{"EXPIRATION_JITTER_MAX_SECONDS"}, "records expire as the store keeps them"},
	{[]string{"LOCAL_CACHE_SIZE_IN_BYTES"}, "denials the last-seen records show cost no round trip, so no local cache is needed"},
	{[]string{"REDIS_POOL_SIZE", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_POOL_ON_EMPTY_BEHAVIOR"}, "the Redis store sizes its pool and batches on its own"},
	{[]string{"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"}, "a failing Redis answers UNAVAILABLE and opens the store's breaker (--redis-breaker); health checks do not probe it"},
	{[]string{"REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS",
		"REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_TIMEOUT", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR"}, "one store serves every unit (REDIS_PERSECOND=true is refused)"},
	{[]string{"MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS", "MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY",
		"MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"}, "memcached is not a store of sluice rls (BACKEND_TYPE=memcache is refused)"},
}

// stopCacheNote is the note said at start when
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is v, unset or false: sluice rls
// answers as envoyproxy/ratelimit does with true, not as it does by
// default.
func stopCacheNote(v string) string {
	set := "unset (false, envoyproxy/ratelimit's default)"
	if v != "" {
		set = "=" + v
	}
	return "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT " + set + ": a difference — sluice rls never spends on a refused request, as envoyproxy/ratelimit does only with true; with false, there, a refused request's hits still count against its limits, so callers over a limit stay refused longer there than here"
}

// redisFromEnv reads envoyproxy/ratelimit's Redis settings: REDIS_URL as
// REDIS_TYPE says (SINGLE: host:port; CLUSTER: host:port,...; SENTINEL:
// the master's name, then the Sentinels' host:port,...), REDIS_AUTH
// (password, or username:password), REDIS_TLS with REDIS_TLS_CACERT and
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION, and CACHE_KEY_PREFIX as the key
// prefix. A unix socket is refused (Sluice dials TCP), as are a client
// certificate and a Sentinel password.
func redisFromEnv(getenv func(string) string, url string) (*config.Redis, error) {
	r := defaultRedis()
	if t := getenv("REDIS_SOCKET_TYPE"); !strings.EqualFold(t, "tcp") {
		got := "REDIS_SOCKET_TYPE=" + t
		if t == "" {
			got = "REDIS_SOCKET_TYPE unset"
		}
		return nil, fmt.Errorf("%s: sluice rls reaches Redis over TCP only (set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port, or give the store with --backend or --store)", got)
	}
	parts := strings.Split(url, ",")
	switch typ := strings.ToUpper(getenv("REDIS_TYPE")); typ {
	case "", "SINGLE":
		if len(parts) != 1 {
			return nil, fmt.Errorf("REDIS_URL=%s: REDIS_TYPE SINGLE takes one host:port", url)
		}
	case "CLUSTER":
	case "SENTINEL":
		if len(parts) < 2 {
			return nil, fmt.Errorf("REDIS_URL=%s: REDIS_TYPE SENTINEL takes the master's name, then the Sentinels' host:port", url)
		}
		r.MasterName, parts = parts[0], parts[1:]
	default:
		return nil, fmt.Errorf("REDIS_TYPE=%s: want SINGLE, CLUSTER or SENTINEL", typ)
	}
	addrs, err := parseRedisAddrs(strings.Join(parts, ","))
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL=%s: %v", url, err)
	}
	r.Addrs = addrs
	if auth := getenv("REDIS_AUTH"); auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			r.Username, r.Password = user, pass
		} else {
			r.Password = auth
		}
	}
	tlsOn := strings.EqualFold(getenv("REDIS_TLS"), "true")
	if tlsOn {
		r.TLS = config.RedisTLS{Enabled: true, CAFile: getenv("REDIS_TLS_CACERT"),
			InsecureSkipVerify: strings.EqualFold(getenv("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"), "true")}
	}
	if p := getenv("CACHE_KEY_PREFIX"); p != "" {
		r.KeyPrefix = p
	}
	if v := getenv("REDIS_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("REDIS_TIMEOUT=%s: want a positive duration such as 10s (--redis-timeout)", v)
		}
		r.Timeout = d
	}
	for _, name := range []string{"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY"} {
		if v := getenv(name); v != "" {
			return nil, fmt.Errorf("%s=%s: sluice rls presents no client certificate to Redis; authenticate with REDIS_AUTH (or --store's redis password) over REDIS_TLS", name, v)
		}
	}
	if getenv("REDIS_SENTINEL_AUTH") != "" {
		return nil, fmt.Errorf("REDIS_SENTINEL_AUTH: sluice rls reaches Sentinels without a password; REDIS_AUTH (or --store's redis password) is the master's")
	}
	return &r, nil
}

// parseEnvBool parses v, the value of the environment variable name, as a
// boolean; unset is false.
func parseEnvBool(name, v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%s: want true or false", name, v)
	}
	return b, nil
}
