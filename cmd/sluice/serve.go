package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/httplimit"
	"github.com/sluice-go/sluice/identity"
	"github.com/sluice-go/sluice/internal/clip"
	"github.com/sluice-go/sluice/metrics"
	"github.com/sluice-go/sluice/throttled"
)

// maxIdleUpstreamConns bounds the idle connections kept to the upstream.
const maxIdleUpstreamConns = 1024

// copyBufferSize is the size of the buffers the proxy copies response
// bodies through: httputil.ReverseProxy's own default.
const copyBufferSize = 32 << 10

// maxPooledCopyBuffers bounds the copy buffers kept between requests
// (8 MiB of them): as many as requests in flight have needed, up to this.
const maxPooledCopyBuffers = 256

// serveUsage is what "sluice serve --help" prints before the flags.
const serveUsage = `Usage: sluice serve --config FILE --listen ADDR --upstream URL [--admin ADDR [--admin-token-file FILE] [--admin-host NAME]...]
       [--idle-timeout D] [--client-body-timeout D] [--client-body-min-rate B]
       [--client-body-rate-grace D] [--send-timeout D] [--max-connections N]
       [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]
       [--backend memory|pebble|bolt|redis --dir DIR --durability sync|interval
        --redis-addr HOST:PORT[,HOST:PORT...] --redis-prefix P --redis-timeout D --redis-breaker B]

Serve is a rate-limiting reverse proxy: each request is decided under the
rules of the configuration file and, when allowed, passed to the upstream;
a denied one is answered 429 with Retry-After.

The listeners and the upstream may be given in the file's server section
instead (listen, upstream, admin, admin_token_file, usage_listen,
throttled_per_rule, tls_cert, tls_key, tls_client_ca); a flag given
overrides its key.

The store is the configuration's store section; the store flags override
it (a --backend other than the file's starts from that backend's defaults).
With the redis backend every gateway of a fleet pointed at one Redis (one
address: a standalone server; several: a Cluster's seed nodes) and one key
prefix spends one budget per caller. Serve does not start when Redis does
not answer within 5s: the error names the address.

When the store fails (Redis down or slower than store.redis.timeout), the
configuration's on_store_error applies: open passes the request, closed
answers 503, local decides it in-process on the rule divided by
store.redis.fleet_size (ceil(limit/fleet_size) per gateway) and goes back
to Redis as soon as it answers; /metrics counts each (store errors by
policy, sluice_local_decisions_total).

Paths: every rule is matched on the canonical path ("//" merged, "." and
".." segments removed; %2F is a "/"; the query is not matched), in any
case with path_case: insensitive, and a GET rule covers HEAD unless a HEAD
rule of the same prefix exists. The upstream gets the canonical path
(forward_path: canonical, the default) or the path as sent (original: for
signed URLs, or %2F kept as data); --forward-path overrides the file's.
Both reload with the file.

Reloading: the rules, the default, the match mode, the identity section and
on_store_error are reloaded when the file changes (it is watched, renames
and symbolic-link swaps included) or on SIGHUP, once it has stayed unchanged
for --reload-settle. A file that does not parse or validate is rejected
whole and logged; so is one with no rule and no default (or only shadow
ones) while rules are in force, unless it says allow_empty: true. The
configuration in force stays; sluice_config_reloads_total{result="error"}
counts them. A reload is put in force whole: no request sees the new rules
beside the old identity or on_store_error. Replace the file atomically
(write another, then rename it over; a ConfigMap does). The store and server
sections are read at start only: a change there is logged and waits for a
restart.

Signals: SIGHUP reloads; SIGTERM or SIGINT stops accepting, drains the
requests in flight (up to 10s), flushes and closes the store, and exits 0.

Admin endpoints (on --admin only, never on --listen):
  /metrics  Prometheus metrics (decisions, cost, latency, store errors,
            reloads, the engine's counters, upstream errors)
  /healthz  "ok"; 503 and the store's error while a durable store
            fails to write (a full disk)
  /rules    the rules in force, as JSON
  POST /v1/reset      rule=NAME&key=KEY (form or JSON): unblock a caller
  GET  /v1/keys?rule=NAME&key=KEY: a caller's record, what it may spend
            now, when it is full again
KEY is a caller as written in overrides: user:ID, key:API_KEY (the raw
key), keyhash:HEX, ip:ADDRESS or global. Every reset is logged with the
remote address and whether a token was given.
  GET  /v1/usage?user=ID&api_key=K&ip=ADDR&plan=P&header.NAME=V[&method=M&path=/P&host=H]:
            what the caller has left under every rule that applies to
            it (or, with path, that request's rules); nothing spent
  GET  /v1/throttled?rule=NAME&limit=N&cursor=C: the callers this
            process denied or found near their limit, per rule, at most
            --throttled-per-rule kept per rule, in pages

--usage-listen ADDR serves GET /v1/usage for the request's own caller
only, identified as the proxy identifies it (a query naming a caller is
refused): for customers, behind the same authenticating proxy as the API.

The admin listener binds to loopback by default (--admin :9090 is
127.0.0.1:9090). On any other address serve refuses to start without
--admin-token-file: then every admin endpoint but /healthz asks for
"Authorization: Bearer TOKEN" (401 otherwise), on loopback too. Every
endpoint but /healthz answers 421 to a Host that is not an IP address,
localhost, the --admin host or a name of --admin-host (server.admin_hosts),
which DNS rebinding needs, and 403 to a POST, PUT, DELETE or PATCH a
browser sends from another origin.

Slow clients (the configuration's server section; each flag over it):
--idle-timeout (75s) closes a keep-alive connection waiting that long for
its next request; --client-body-timeout (60s) cuts a request body that
sends nothing for that long (408, and the upstream request ends), and
--client-body-min-rate (240 bytes a second, after --client-body-rate-grace,
5s) one that arrives slower than that on average; --send-timeout (60s)
closes a connection whose client takes that long to accept one write of
the response; --max-connections (1024) caps the client connections open at
once (past it new ones wait). The timeouts count inactivity: a body or a
response that keeps moving is never cut by them. Headers must arrive within
10s. A timeout of 1ms to 24h and a cap of 1 to 1048576 are accepted.

Caller identity: a user- or api_key-scoped rule counts an anonymous caller
by its IP address. No proxy is trusted unless identity.trusted_proxies lists
it, and a client on a trusted address may name any address.

Exit status: 2 for a usage error or an invalid configuration (named by
file, line and key), 1 for any other failure.

Flags:
`

// runServeCmd is the "serve" command: runServe until SIGTERM or SIGINT.
var runServeCmd = untilStopped(runServe)

// lockedWriter serialises writes to w: the logger is used from many
// goroutines and w may be a plain buffer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// runServe runs the rate-limiting reverse proxy until ctx ends, then
// stops accepting, drains the requests in flight, closes the configuration
// watcher and the engine (which flushes the store) and returns 0. ready,
// if not nil, is called once both listeners are bound with their addresses
// (admin is empty without --admin). Exit status: 2 for a usage error or an
// invalid configuration, 1 for any other failure. The start-up and the
// shutdown are process's (process.go); runServe supplies the proxy.
//
// It reads as its steps: the flags, the configuration, the store, the
// limited proxy over them (the handler a reload replaces whole), then the
// listeners until ctx ends.
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(listen, admin string)) int {
	p := newProcess("sluice serve", stderr)
	p.reportClose = true
	f, status, ok := parseServeFlags(p, args, stdout)
	if !ok {
		return status
	}
	cfg, rs, sv, status, ok := f.load(p)
	if !ok {
		return status
	}
	tlsCfg, status, ok := p.checkListeners(f.tls, []string{"h2", "http/1.1"}, f.admin, f.adminTokenFile)
	if !ok {
		return status
	}
	bf := f.store.over(fileStore(cfg, f.config))
	if status, ok := p.openEngine(bf, func(o *engine.Options) { o.FlushInterval = cfg.Store.FlushInterval }); !ok {
		return status
	}
	defer p.close()
	g, status, ok := newLimitedProxy(p, f, bf, cfg, rs)
	if !ok {
		return status
	}
	defer g.close()
	warnEvictingRedis(ctx, p.log, p.eng.Backend(), rs) // serve_calendar.go
	w, err := config.Watch(f.config, nil, config.WatchOptions{
		Initial:  cfg,
		Logger:   p.log,
		Metrics:  g.counts,
		SIGHUP:   true,
		Apply:    g.apply,
		OnReload: g.reloaded,
		Settle:   f.reloadSettle,
	})
	if err != nil {
		return p.fail(1, "watching %s: %v", f.config, err)
	}
	defer w.Close()
	return g.run(ctx, p, f, sv, tlsCfg, w, ready)
}

// serveFlags are serve's command line, checked.
type serveFlags struct {
	config, listen        string
	upstream              *url.URL
	admin, adminTokenFile string
	adminHosts            []string           // --admin-host, split at commas
	forwardPath           config.ForwardPath // --forward-path; empty when not given
	shadowHeaders         bool
	reloadSettle          time.Duration
	tls                   tlsFlags
	usageListen           string               // --usage-listen; none when empty
	throttledPerRule      int                  // --throttled-per-rule; 0 turns the list off
	store                 *backendFlags        // the store flags, laid over the file's section
	serverOver            func(*config.Server) // lays the server flags given over a server section
}

// parseServeFlags parses and checks serve's command line. ok is false when
// the command must exit with status (--help, or a usage error).
func parseServeFlags(p *process, args []string, stdout io.Writer) (f serveFlags, status int, ok bool) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(p.errw)
	configPath := fs.String("config", "", "the configuration `file` (YAML); required")
	listen := fs.String("listen", "", "the `address` the proxy listens on, such as :8080; required unless the file's server.listen gives it")
	upstream := fs.String("upstream", "", "the `URL` of the service requests are passed to; required unless the file's server.upstream gives it")
	admin, adminTokenFile := addAdminFlags(fs, "/rules")
	forward := addForwardPathFlag(fs)
	adminHosts := addAdminHostFlag(fs)
	idleTimeout := fs.Duration("idle-timeout", config.DefaultIdleTimeout, "how long a keep-alive connection may wait for its next request (nginx's keepalive_timeout), over the configuration's server.idle_timeout")
	bodyTimeout := fs.Duration("client-body-timeout", config.DefaultClientBodyTimeout, "the longest a request body may go without sending a byte while it is read; past it the request is cut and answered 408 (nginx's client_body_timeout), over server.client_body_timeout")
	bodyMinRate := fs.Int64("client-body-min-rate", config.DefaultClientBodyMinRate, "the slowest a request body may arrive on average, in `bytes` a second, once --client-body-rate-grace has passed; slower, it is cut and answered 408 (Kestrel's MinRequestBodyDataRate); 0 turns it off; over server.client_body_min_rate")
	bodyRateGrace := fs.Duration("client-body-rate-grace", config.DefaultClientBodyRateGrace, "how long a request body may take before --client-body-min-rate applies, over server.client_body_rate_grace")
	sendTimeout := fs.Duration("send-timeout", config.DefaultSendTimeout, "the longest one write of a response to the client may wait (nginx's send_timeout), over server.send_timeout")
	maxConns := fs.Int("max-connections", config.DefaultMaxConnections, "the most client `connections` open at once; past it new ones wait to be accepted (nginx's worker_connections), over server.max_connections")
	shadowHeaders := fs.Bool("shadow-headers", false, "send a shadow rule's rate-limit headers (never Retry-After) on requests no enforced rule covers")
	reloadSettle := addReloadSettleFlag(fs)
	usageListen := fs.String("usage-listen", "", "the `address` of a listener answering GET /v1/usage for the request's own caller only, identified as the proxy identifies it; none when empty")
	throttledPerRule := fs.Int("throttled-per-rule", throttled.DefaultPerRule, "how many `callers` the admin listener's /v1/throttled keeps per rule (those denied or near their limit); 0 turns it off")
	tlsf := addTLSFlags(fs, "the proxy's listener")
	storeFlagsGiven := addBackendFlags(fs)
	fs.Lookup("backend").Usage = "the `store`, over the configuration's store.backend: memory, pebble, bolt or redis"
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage)
		fs.PrintDefaults()
	}
	if status, done := parseArgs(fs, args, stdout); done {
		return f, status, false
	}
	fail := func(format string, a ...any) (serveFlags, int, bool) { return f, p.fail(2, format, a...), false }
	switch {
	case fs.NArg() > 0:
		return fail("unexpected argument %q", fs.Arg(0))
	case *configPath == "":
		return fail("--config is required")
	case *reloadSettle <= 0:
		return fail("--reload-settle %s: want a positive duration", *reloadSettle)
	case *throttledPerRule < 0 || *throttledPerRule > throttled.MaxPerRule:
		return fail("--throttled-per-rule %d: want 0 (off) to %d", *throttledPerRule, throttled.MaxPerRule)
	}
	for _, a := range []struct{ flag, addr string }{{"listen", *listen}, {"usage-listen", *usageListen}} {
		if _, _, err := net.SplitHostPort(a.addr); a.addr != "" && err != nil {
			return fail("--%s %s: want host:port, or :port for every address", a.flag, a.addr)
		}
	}
	if *upstream != "" {
		if _, err := parseUpstream(*upstream); err != nil {
			return fail("--upstream %s: %v", *upstream, err)
		}
	}
	f = serveFlags{
		config: *configPath, adminHosts: splitHosts(*adminHosts),
		forwardPath: config.ForwardPath(*forward), shadowHeaders: *shadowHeaders, reloadSettle: *reloadSettle,
		tls: tlsf, store: storeFlagsGiven,
	}
	if err := checkAdminHosts("--admin-host", f.adminHosts); err != nil {
		return fail("%v", err)
	}
	if err := checkForwardPath(f.forwardPath); err != nil {
		return fail("%v", err)
	}
	// The server section's flags given, to be laid over the file's.
	var given []func(*config.Server)
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "idle-timeout":
			given = append(given, func(sv *config.Server) { sv.IdleTimeout = *idleTimeout })
		case "client-body-timeout":
			given = append(given, func(sv *config.Server) { sv.ClientBodyTimeout = *bodyTimeout })
		case "send-timeout":
			given = append(given, func(sv *config.Server) { sv.SendTimeout = *sendTimeout })
		case "client-body-min-rate":
			given = append(given, func(sv *config.Server) { sv.ClientBodyMinRate = *bodyMinRate })
		case "client-body-rate-grace":
			given = append(given, func(sv *config.Server) { sv.ClientBodyRateGrace = *bodyRateGrace })
		case "max-connections":
			given = append(given, func(sv *config.Server) { sv.MaxConnections = *maxConns })
		case "listen":
			given = append(given, func(sv *config.Server) { sv.Listen = *listen })
		case "upstream":
			given = append(given, func(sv *config.Server) { sv.Upstream = *upstream })
		case "admin":
			given = append(given, func(sv *config.Server) { sv.Admin = *admin })
		case "admin-token-file":
			given = append(given, func(sv *config.Server) { sv.AdminTokenFile = *adminTokenFile })
		case "usage-listen":
			given = append(given, func(sv *config.Server) { sv.UsageListen = *usageListen })
		case "throttled-per-rule":
			given = append(given, func(sv *config.Server) { sv.ThrottledPerRule = *throttledPerRule })
		case "tls-cert":
			given = append(given, func(sv *config.Server) { sv.TLSCert = *tlsf.cert })
		case "tls-key":
			given = append(given, func(sv *config.Server) { sv.TLSKey = *tlsf.key })
		case "tls-client-ca":
			given = append(given, func(sv *config.Server) { sv.TLSClientCA = *tlsf.clientCA })
		}
	})
	f.serverOver = func(sv *config.Server) {
		for _, set := range given {
			set(sv)
		}
	}
	return f, 0, true
}

// load loads the configuration file and compiles its rules, and returns
// its server section with the flags given over it, checked against the
// file's bounds. ok is false when the command must exit with status.
func (f *serveFlags) load(p *process) (cfg *config.Config, rs *sluice.Ruleset, sv config.Server, status int, ok bool) {
	fail := func(format string, a ...any) (*config.Config, *sluice.Ruleset, config.Server, int, bool) {
		return nil, nil, sv, p.fail(2, format, a...), false
	}
	cfg, err := config.Load(f.config)
	if err != nil {
		return fail("%v", err) // a *config.Error names file:line and the field
	}
	if rs, err = cfg.Ruleset(); err != nil {
		return fail("%s: %v", f.config, err)
	}
	// The server section, read at start only, the flags given over it.
	sv = cfg.Server
	f.serverOver(&sv)
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"idle-timeout", sv.IdleTimeout}, {"client-body-timeout", sv.ClientBodyTimeout}, {"send-timeout", sv.SendTimeout}, {"client-body-rate-grace", sv.ClientBodyRateGrace}} {
		// The file's bounds (config.Load refuses the same values there).
		if d.v < config.MinServerTimeout || d.v > config.MaxServerTimeout {
			return fail("--%s %v: want a duration from 1ms to 24h, such as 60s", d.flag, d.v)
		}
	}
	if sv.ClientBodyMinRate < 0 || sv.ClientBodyMinRate > config.MaxClientBodyMinRate {
		return fail("--client-body-min-rate %d: want 0 (off) to %d bytes a second", sv.ClientBodyMinRate, config.MaxClientBodyMinRate)
	}
	if sv.MaxConnections < 1 || sv.MaxConnections > config.MaxConnectionsCap {
		return fail("--max-connections %d: want 1 to %d", sv.MaxConnections, config.MaxConnectionsCap)
	}
	// The listeners and the upstream, the flags given over the file's
	// (both checked as they were read).
	switch {
	case sv.Listen == "":
		return fail("--listen is required (or server.listen in %s)", f.config)
	case sv.Upstream == "":
		return fail("--upstream is required (or server.upstream in %s)", f.config)
	case sv.AdminTokenFile != "" && sv.Admin == "":
		return fail("--admin-token-file (server.admin_token_file): only with --admin (server.admin)")
	case len(f.adminHosts) > 0 && sv.Admin == "":
		return fail("--admin-host: only with --admin (server.admin)")
	case cfg.Server.TLSCert+cfg.Server.TLSKey+cfg.Server.TLSClientCA != "" && (sv.TLSCert == "" || sv.TLSKey == ""):
		return fail("%s: server.tls_cert and server.tls_key (or --tls-cert and --tls-key): give both, and server.tls_client_ca only with them", f.config)
	}
	if sv.Admin == cfg.Server.Admin && sv.Admin != "" && sv.AdminTokenFile == "" {
		// An address from the file is refused here, naming the file's
		// field; one from the flag by checkListeners, naming the flag.
		if host, _, _ := net.SplitHostPort(sv.Admin); !isLoopbackHost(host) {
			return fail("%s: server.admin %s: %s is not loopback: its endpoints (resets among them) would be open to the network; set server.admin_token_file (or --admin-token-file), or bind to 127.0.0.1", f.config, sv.Admin, host)
		}
	}
	f.listen, f.admin, f.adminTokenFile, f.usageListen, f.throttledPerRule = sv.Listen, sv.Admin, sv.AdminTokenFile, sv.UsageListen, sv.ThrottledPerRule
	*f.tls.cert, *f.tls.key, *f.tls.clientCA = sv.TLSCert, sv.TLSKey, sv.TLSClientCA
	f.upstream, _ = parseUpstream(sv.Upstream)
	logWarnings(p.log, cfg)
	return cfg, rs, sv, 0, true
}

// parseUpstream parses the upstream's URL: http or https, with a host.
func parseUpstream(s string) (*url.URL, error) {
	up, err := url.Parse(s)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return nil, errors.New("want an http or https URL such as http://127.0.0.1:8081")
	}
	return up, nil
}

// isLoopbackHost reports whether checkAdminFlags takes host, an admin
// address's, as loopback: none (read as 127.0.0.1), a loopback IP
// address, or a name (which it does not resolve).
func isLoopbackHost(host string) bool {
	if host == "" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err != nil || ip.IsLoopback()
}

// logWarnings logs what cfg says that is valid but most likely not meant.
func logWarnings(log *slog.Logger, cfg *config.Config) {
	for _, w := range cfg.Warnings {
		log.Warn("sluice serve: the configuration may not say what was meant", "warning", w)
	}
}

// fileStore is the store section of cfg, read from the file at path.
func fileStore(cfg *config.Config, path string) backendFlags {
	bf := storeFlags(cfg.Store)
	bf.from = path
	return bf
}

// limitedProxy is serve's handler, the rate-limited reverse proxy, and what the
// admin listener reads of it. What a reload changes (the rules, the
// identity section, the exempt list, on_store_error, the response section,
// forward_path) is one immutable proxyConfig, built whole before it is
// published with one atomic store: a request takes one and is decided,
// answered and forwarded under it, so no request sees new rules beside an
// old identity or policy, and a reload that cannot be built publishes
// nothing. What is read at start only (the store, the server section, the
// upstream, the flags) is the proxy's own.
type limitedProxy struct {
	cur atomic.Pointer[proxyConfig] // the configuration in force

	configPath    string
	eng           *engine.Engine
	local         *sluice.LocalFallback // on_store_error local's decisions, kept across reloads
	localEng      *engine.Engine        // local's engine, closed by close
	counts        *metrics.Metrics
	upstream      *url.URL
	transport     http.RoundTripper
	buffers       copyBuffers
	upstreamErrs  *upstreamErrors
	errorLog      *log.Logger
	log           *slog.Logger
	forwardPath   config.ForwardPath // --forward-path; empty when not given
	shadowHeaders bool
	started       *config.Config // the configuration at start, whose server section is in force
	fleet         int            // the fleet size on_store_error local divides by
	storeAttrs    []any
	tracker       *throttled.Tracker // the callers denied or near their limit; nil when off
	perRule       int                // the tracker's bound per rule
}

// proxyConfig is one configuration in force: never changed once
// published.
type proxyConfig struct {
	rules   *sluice.Registry     // holds the ruleset; never swapped
	id      *identity.Identifier // the identity section; the admin endpoints read keys under it
	handler http.Handler         // the rate limiter over the proxy, under all of the above
	usage   usageReader          // the admin's usage reader: the caller a query names (admin_usage.go)
	own     *httplimit.Usage     // --usage-listen's: the request's own caller, as handler identifies it
}

// newLimitedProxy builds the proxy over p's engine and puts cfg, whose
// ruleset is rs, in force. ok is false when the command must exit with
// status; otherwise close the proxy after run.
func newLimitedProxy(p *process, f serveFlags, bf backendFlags, cfg *config.Config, rs *sluice.Ruleset) (g *limitedProxy, status int, ok bool) {
	g = &limitedProxy{
		configPath:    f.config,
		eng:           p.eng,
		counts:        metrics.New(nil),
		upstream:      f.upstream,
		transport:     upstreamTransport(),
		buffers:       newCopyBuffers(maxPooledCopyBuffers),
		errorLog:      slog.NewLogLogger(p.log.Handler(), slog.LevelError),
		log:           p.log,
		forwardPath:   f.forwardPath,
		shadowHeaders: f.shadowHeaders,
		started:       cfg,
		fleet:         1,
		storeAttrs:    storeAttrs(bf),
		perRule:       f.throttledPerRule,
	}
	g.upstreamErrs = &upstreamErrors{log: p.log}
	if g.perRule > 0 {
		// Kept across reloads, with what it has seen.
		g.tracker, _ = throttled.New(&throttled.Options{PerRule: g.perRule, Now: p.eng.Clock().Now})
	}
	// The in-process engine on_store_error local decides on when the
	// store fails. It is made whatever the policy, since a reload may
	// turn local on, and kept across reloads with what callers spent.
	var err error
	if g.localEng, err = engine.New(memory.New(nil), &engine.Options{Logger: p.log}); err != nil {
		return nil, p.fail(1, "starting the local engine: %v", err), false
	}
	if bf.name == config.BackendRedis {
		g.fleet = bf.redis.FleetSize
		g.storeAttrs = append(g.storeAttrs, "fleet_size", g.fleet)
	}
	if g.local, err = sluice.NewLocalFallback(g.localEng, g.fleet); err != nil {
		g.close()
		return nil, p.fail(2, "%s: store.redis.fleet_size: %v", f.config, err), false
	}
	g.counts.InitRuleset(rs)
	if err := g.apply(cfg, rs); err != nil {
		g.close()
		return nil, p.fail(2, "%s: %v", f.config, err), false
	}
	return g, 0, true
}

// close closes the local engine.
func (g *limitedProxy) close() { g.localEng.Close() }

// build builds the proxy's configuration for cfg, whose ruleset is rs.
// It fails only where the parser and the packages it feeds disagree.
func (g *limitedProxy) build(cfg *config.Config, rs *sluice.Ruleset) (*proxyConfig, error) {
	id, err := identity.New(cfg.Identity)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	exempt, err := cfg.ExemptFunc(id)
	if err != nil {
		return nil, err
	}
	reg := sluice.NewRegistry(rs)
	hc := httplimit.Config{
		Engine:          g.eng,
		Registry:        reg,
		Identifier:      id,
		Metrics:         g.counts,
		OnStoreError:    cfg.OnStoreError,
		Local:           g.local,
		Logger:          g.log,
		ShadowHeaders:   g.shadowHeaders,
		DenyStatus:      cfg.Response.DenyStatus,
		ProblemDetails:  cfg.Response.Problem,
		ResetAsUnixTime: cfg.Response.ResetUnix,
		Exempt:          exempt,
	}
	if g.tracker != nil {
		hc.Watch = g.tracker
	}
	mw, err := httplimit.New(hc)
	if err != nil {
		return nil, err
	}
	own, err := httplimit.NewUsage(hc)
	if err != nil {
		return nil, err
	}
	named := hc
	named.Identity = namedCaller // admin_usage.go
	usage := usageReader{fwd: cfg.Identity.ForwardingHeader}
	if usage.u, err = httplimit.NewUsage(named); err != nil {
		return nil, err
	}
	if ps := cfg.Identity.TrustedProxies; len(ps) > 0 {
		usage.proxy = ps[0].Addr()
	}
	proxy := &httputil.ReverseProxy{
		Director:     forwardDirector(forwardPathOf(g.forwardPath, cfg), httputil.NewSingleHostReverseProxy(g.upstream).Director), // serve_path.go
		Transport:    g.transport,
		BufferPool:   g.buffers,
		ErrorLog:     g.errorLog,
		ErrorHandler: g.upstreamErrs.handle,
	}
	return &proxyConfig{rules: reg, id: id, handler: mw(proxy), usage: usage, own: own}, nil
}

// apply puts cfg, whose ruleset is rs, in force with one atomic store, or
// nothing when it cannot be built (config.WatchOptions.Apply).
func (g *limitedProxy) apply(cfg *config.Config, rs *sluice.Ruleset) error {
	c, err := g.build(cfg, rs)
	if err != nil {
		return err
	}
	g.cur.Store(c)
	if g.tracker != nil {
		var names []string
		for _, r := range rs.Rules() {
			names = append(names, r.Name())
		}
		if d := rs.Default(); d != nil {
			names = append(names, d.Name())
		}
		g.tracker.Keep(names)
	}
	return nil
}

// reloaded logs what a reload put in force says that may not be meant
// (config.WatchOptions.OnReload).
func (g *limitedProxy) reloaded(next *config.Config, err error) {
	if err != nil {
		return
	}
	logWarnings(g.log, next)
	if !reflect.DeepEqual(next.Server, g.started.Server) {
		g.log.Warn("sluice serve: the server section changed; it takes effect only after a restart", "config", g.configPath)
	}
}

// ServeHTTP serves r under the configuration in force.
func (g *limitedProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.cur.Load().handler.ServeHTTP(w, r)
}

// inForce returns the rules and the identity section in force, of one
// configuration.
func (g *limitedProxy) inForce() (*sluice.Ruleset, *identity.Identifier) {
	c := g.cur.Load()
	return c.rules.Ruleset(), c.id
}

// run serves the proxy on --listen, with the server section sv and
// tlsCfg (nil without TLS), and the admin endpoints on --admin, until ctx
// ends; then it stops the watcher w (process.run).
func (g *limitedProxy) run(ctx context.Context, p *process, f serveFlags, sv config.Server, tlsCfg *tls.Config, w *config.Watcher, ready func(listen, admin string)) int {
	srv := &http.Server{
		Handler: slowClientGuard{next: g, body: sv.ClientBodyTimeout, send: sv.SendTimeout,
			minRate: sv.ClientBodyMinRate, grace: sv.ClientBodyRateGrace},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       sv.IdleTimeout,
		ErrorLog:          g.errorLog,
	}
	var ul *usageListener
	var usageAttrs []any
	if f.usageListen != "" {
		var err error
		if ul, err = listenUsage(f.usageListen, tlsCfg, func() *httplimit.Usage { return g.cur.Load().own }, g.errorLog); err != nil { // admin_usage.go
			return p.fail(1, "%v", err)
		}
		go ul.srv.Serve(ul.ln)
		defer ul.srv.Close() // at once should --listen fail to bind; drained with it otherwise
		usageAttrs = []any{"usage", ul.ln.Addr().String()}
	}
	attrs := append(append(usageAttrs, "upstream", g.upstream.String(), "config", f.config, "on_store_error", string(g.started.OnStoreError),
		"idle_timeout", sv.IdleTimeout, "client_body_timeout", sv.ClientBodyTimeout,
		"client_body_min_rate", sv.ClientBodyMinRate, "client_body_rate_grace", sv.ClientBodyRateGrace, "send_timeout", sv.SendTimeout,
		"max_connections", sv.MaxConnections), g.storeAttrs...)
	return p.run(ctx, listener{
		flag: "listen",
		addr: f.listen,
		serve: func(ln net.Listener) error {
			ln = newLimitListener(ln, sv.MaxConnections)
			if tlsCfg != nil {
				ln = tls.NewListener(ln, tlsCfg)
			}
			return srv.Serve(ln)
		},
		drain: func(ctx context.Context) error {
			if ul != nil {
				ul.srv.Shutdown(ctx)
			}
			return srv.Shutdown(ctx)
		},
		stop: func() {
			if err := w.Close(); err != nil {
				g.log.Warn("sluice serve: closing the configuration watcher", "err", err)
			}
		},
		attrs: attrs,
	}, adminListener{
		addr:      f.admin,
		tokenFile: f.adminTokenFile,
		hosts:     append(f.adminHosts, sv.AdminHosts...),
		handler: func() http.Handler {
			rules := func() *sluice.Ruleset { rs, _ := g.inForce(); return rs }
			rest := adminHandler(rules, g.counts, g.upstreamErrs, g.eng, storeCollectors(p.store)...)
			rest = mountUsageEndpoints(adminUsage(func() usageReader { return g.cur.Load().usage }), adminThrottled(g.tracker, g.perRule, rules), rest)
			return newAdminKeys(g.inForce, g.eng, g.log).mount(rest)
		},
		errorLog:    g.errorLog,
		reportDrain: true,
	}, ready)
}

// upstreamTransport is the proxy's transport to the upstream: the default
// transport's dialer, proxy and timeouts, but keeping up to
// maxIdleUpstreamConns idle connections to the one upstream, as many as
// requests in flight have needed. The default keeps two per host, so under
// concurrency every request past the second would dial a new connection
// and leave it in TIME_WAIT.
//
// Compression is left to the client and the upstream: the client's
// Accept-Encoding (or its absence) reaches the upstream unchanged and the
// body comes back as the upstream sent it. (By default the transport would
// ask a client's gzip for it, then decompress it again for a client that
// never asked.)
func upstreamTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0 // no limit across hosts; there is one host
	t.MaxIdleConnsPerHost = maxIdleUpstreamConns
	t.DisableCompression = true
	return t
}

// copyBuffers is the proxy's httputil.BufferPool: a bounded free list of
// copyBufferSize buffers, so that a response body is not copied through a
// fresh 32 KiB allocation each request (ReverseProxy's behaviour without a
// pool). A channel rather than a sync.Pool: putting a slice in a sync.Pool
// allocates its header.
type copyBuffers chan []byte

func newCopyBuffers(n int) copyBuffers { return make(copyBuffers, n) }

// Get implements httputil.BufferPool.
func (c copyBuffers) Get() []byte {
	select {
	case b := <-c:
		return b
	default:
		return make([]byte, copyBufferSize)
	}
}

// Put implements httputil.BufferPool.
func (c copyBuffers) Put(b []byte) {
	if cap(b) < copyBufferSize {
		return
	}
	select {
	case c <- b[:copyBufferSize]:
	default: // full: let the collector have it
	}
}

// upstreamErrors is the proxy's ErrorHandler: it answers a request the
// upstream could not serve, counts it, and logs it. A client that went away
// before the answer (its request's context canceled) is the common case of
// a busy proxy, not a fault: it is counted apart and logged at debug level
// only. Every other error is answered 502 Bad Gateway and logged as an
// error, as httputil.ReverseProxy's default handler does.
type upstreamErrors struct {
	log                              *slog.Logger
	canceled, failures, bodyTimeouts atomic.Uint64
}

// Descriptions of the counters upstreamErrors exports.
var (
	descClientGone = prometheus.NewDesc("sluice_upstream_client_canceled_total",
		"Proxied requests whose client went away before the upstream answered.", nil, nil)
	descUpstreamErrors = prometheus.NewDesc("sluice_upstream_errors_total",
		"Proxied requests the upstream could not answer (502 Bad Gateway).", nil, nil)
	descBodyTimeouts = prometheus.NewDesc("sluice_client_body_timeouts_total",
		"Proxied requests whose client sent nothing of its body for client_body_timeout, or sent it slower than client_body_min_rate (408 Request Timeout).", nil, nil)
)

func (u *upstreamErrors) handle(w http.ResponseWriter, r *http.Request, err error) {
	if bodyTimedOut(r.Context()) {
		u.bodyTimeouts.Add(1)
		u.log.Info("sluice serve: request body cut: the client sent nothing for client_body_timeout, or less than client_body_min_rate",
			"method", clip.String(r.Method, clip.Max), "path", clip.String(r.URL.Path, clip.Max), "remote", r.RemoteAddr)
		w.Header().Set("Connection", "close")
		http.Error(w, "request body timeout", http.StatusRequestTimeout) // nginx's answer
		return
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		u.canceled.Add(1)
		u.log.Debug("sluice serve: client went away before the upstream answered",
			"method", clip.String(r.Method, clip.Max), "path", clip.String(r.URL.Path, clip.Max), "err", clip.String(err.Error(), 512))
		w.WriteHeader(499) // nginx's "client closed request"; nobody reads it
		return
	}
	u.failures.Add(1)
	// A client chooses the path (up to the 1 MB of headers net/http reads):
	// a log line quotes a few hundred bytes of it.
	u.log.Error("sluice serve: upstream error", "method", clip.String(r.Method, clip.Max), "path", clip.String(r.URL.Path, clip.Max), "err", clip.String(err.Error(), 512))
	w.WriteHeader(http.StatusBadGateway)
}

// Describe implements prometheus.Collector.
func (u *upstreamErrors) Describe(ch chan<- *prometheus.Desc) {
	ch <- descClientGone
	ch <- descUpstreamErrors
	ch <- descBodyTimeouts
}

// Collect implements prometheus.Collector.
func (u *upstreamErrors) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descClientGone, prometheus.CounterValue, float64(u.canceled.Load()))
	ch <- prometheus.MustNewConstMetric(descUpstreamErrors, prometheus.CounterValue, float64(u.failures.Load()))
	ch <- prometheus.MustNewConstMetric(descBodyTimeouts, prometheus.CounterValue, float64(u.bodyTimeouts.Load()))
}

// ruleJSON is one rule as /rules shows it.
type ruleJSON struct {
	Name       string `json:"name"`
	Method     string `json:"method"`
	PathPrefix string `json:"path_prefix"`
	Path       string `json:"path,omitempty"` // a path pattern, in place of path_prefix
	Host       string `json:"host,omitempty"`
	Scope      string `json:"scope"`
	Algorithm  string `json:"algorithm"`
	Limit      int64  `json:"limit"`
	Window     string `json:"window"`
	Burst      int64  `json:"burst"`
	Cost       int64  `json:"cost"`
	Plan       string `json:"plan,omitempty"`
	Shadow     bool   `json:"shadow,omitempty"`
	Calendar   string `json:"calendar,omitempty"` // the windows of a calendar rule: "month in Europe/Berlin from day 15"
	Group      string `json:"group,omitempty"`
	Counter    string `json:"counter,omitempty"` // a counter shared with other rules, in place of the rule's name
}

// rulesJSON is the body of /rules: the ruleset in force.
type rulesJSON struct {
	Match   string     `json:"match"`
	Rules   []ruleJSON `json:"rules"`
	Default *ruleJSON  `json:"default"`
}

func toRuleJSON(c *sluice.CompiledRule) ruleJSON {
	r := c.Rule()
	return ruleJSON{
		Name:       r.Name,
		Method:     r.Method,
		PathPrefix: r.PathPrefix,
		Path:       r.Path,
		Host:       r.Host,
		Group:      r.Group,
		Counter:    r.Counter,
		Scope:      string(r.Scope),
		Algorithm:  string(r.Algorithm),
		Limit:      r.Limit,
		Window:     r.Window.String(),
		Burst:      r.Burst,
		Cost:       r.Cost,
		Plan:       r.Plan,
		Shadow:     r.Shadow,
		Calendar:   calendarOf(c),
	}
}

// adminHandler serves /metrics, /healthz and /rules (the ruleset rules
// returns); /metrics also serves the collectors in store.
func adminHandler(rules func() *sluice.Ruleset, m *metrics.Metrics, up *upstreamErrors, eng *engine.Engine, store ...prometheus.Collector) http.Handler {
	preg := prometheus.NewRegistry()
	preg.MustRegister(m.Collector(eng), up)
	preg.MustRegister(store...)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(preg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", healthz(eng))
	mux.HandleFunc("GET /rules", func(w http.ResponseWriter, _ *http.Request) {
		rs := rules()
		out := rulesJSON{Match: string(rs.Mode()), Rules: []ruleJSON{}}
		for _, c := range rs.Rules() {
			out.Rules = append(out.Rules, toRuleJSON(c))
		}
		if d := rs.Default(); d != nil {
			dj := toRuleJSON(d)
			out.Default = &dj
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(out)
	})
	return mux
}
