package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/envoyrls/rlsfile"
	"github.com/sluice-go/sluice/envoyrls/rlsmetrics"
	"github.com/sluice-go/sluice/envoyrls/xds"
	"github.com/sluice-go/sluice/metrics"
)

// rlsUsage is what "sluice rls --help" prints before the flags.
const rlsUsage = `Usage: sluice rls --config FILE_OR_DIR | --xds HOST:PORT [--xds-node ID ...] --grpc ADDR
       [--admin ADDR [--admin-token-file FILE] [--admin-host NAME]...]
       [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]
       [--store FILE] [--backend memory|pebble|bolt|redis --dir DIR --durability sync|interval
        --redis-addr HOST:PORT[,HOST:PORT...] --redis-prefix P --redis-timeout D --redis-breaker B]
       [--headers both|ietf|x-ratelimit|envoy|none --shadow-headers --shadow-mode --quota-mode
        --dynamic-metadata --near-limit-ratio R --merge-domains]
       [--max-descriptors N --max-entries N --max-value-bytes N]

Rls is Envoy's external rate-limit service
(envoy.service.ratelimit.v3.RateLimitService) over Sluice's engine. It reads
envoyproxy/ratelimit's configuration files unchanged: a directory of YAML
files, one domain each, or a single file. rate_limit takes two optional
fields of Sluice's own: algorithm (token_bucket, leaky_bucket, fixed_window,
sliding_log, sliding_counter or gcra; fixed_window when absent, so a
migrated file answers as before) and burst (a bucket algorithm's capacity).

All the descriptors of a request are decided as one: nothing is spent unless
every limited descriptor allows, and a rejected request spends nothing.
hits_addend (the descriptor's, else the request's) is the cost. A
shadow_mode limit is decided and counted but answers OK; an unlimited one
is always OK; a descriptor that matches no limit is OK. The response carries
rate-limit headers for Envoy to add (--headers; a denial adds Retry-After).

The store is memory unless --store names a file with a store section (the
one sluice serve reads: backend, dir, durability, or redis with its addrs,
timeout, breaker, TLS and password); the --backend, --dir, --durability and
--redis-* flags go over it.

A store failure answers UNAVAILABLE: Envoy then lets the request pass,
unless its filter sets failure_mode_deny.

Bounds: a request with more than --max-descriptors descriptors (64), a
descriptor with more than --max-entries entries (32), or a domain, entry key
or value longer than --max-value-bytes (65536) is answered INVALID_ARGUMENT,
deciding nothing; a call's metadata is bounded at 64 KiB. A value longer than 64 bytes is kept in the store's key as
a 33-byte hash of it, so a key's size does not grow with the values. A call
whose deadline has passed, or that Envoy cancelled, decides nothing. A
hits_addend above a limit's capacity can never pass: OVER_LIMIT, with no
duration_until_reset and no Retry-After or reset header.

Reloading: the configuration is watched (renames, symbolic-link swaps and
ConfigMap updates included) and reloaded on SIGHUP, once it has stayed
unchanged for --reload-settle; one that does not load is rejected whole and
logged with its file, line and field, and the configuration in force stays.
So is one where a file that limited would limit nothing (or the whole
configuration would), unless the file says allow_empty: true. Replace files
atomically (write aside, then rename; a ConfigMap does). A limit that keeps
its place keeps what callers spent under it.

From a control plane (--xds, or CONFIG_TYPE=GRPC_XDS_SOTW): rls opens an
aggregated discovery stream for RateLimitConfig resources, as
envoyproxy/ratelimit does, and puts each push in force whole; one that does
not load is NACKed with the reason and logged, and the one in force stays.
Until the first push, calls answer UNAVAILABLE and health checks
NOT_SERVING. The stream is reopened after a failure, keeping the
configuration in force meanwhile.

Signals: SIGHUP reloads; SIGTERM or SIGINT stops accepting, finishes the
calls in flight (up to 10s), flushes and closes the store, and exits 0.

The gRPC listener also serves grpc.health.v1 and server reflection.
Admin endpoints (on --admin only):
  /metrics  Prometheus metrics: per domain and descriptor the hits, those
            over the limit, near it, within it, and shadow_mode would-be
            denials; requests by overall code; reloads; the engine's
  /healthz  "ok"; 503 and the store's error while a durable store
            fails to write (a full disk; gRPC health: NOT_SERVING)
  /config   the domains and limits in force, as JSON
  POST /v1/reset  domain=DOMAIN&entry=KEY=VALUE&entry=… (a form, or JSON
            {"domain": …, "descriptor": [{"key": …, "value": …}]}): forget
            the budget that descriptor spends under the limit it matches;
            logged with the remote address
  GET /v1/keys?domain=DOMAIN&entry=KEY=VALUE&…: that budget's state: the
            decoded record, what it may spend now, when it is full again
  The entries are the descriptor's as Envoy sends them, in order.

The admin listener binds to loopback by default (--admin :9090 is
127.0.0.1:9090). Bound elsewhere, rls refuses to start unless
--admin-token-file names a file holding a bearer token (16 bytes at
least); then every admin endpoint but /healthz asks for
"Authorization: Bearer TOKEN". Every endpoint but /healthz answers 421 to
a Host that is not an IP address, localhost, the --admin host or a name
of --admin-host, which DNS rebinding needs, and 403 to a POST, PUT,
DELETE or PATCH a browser sends from another origin.

Exit status: 2 for a usage error or an invalid configuration (named by
file, line and field), 1 for any other failure.

Flags:
`

// rlsMaxHeaderList bounds the metadata of one call to the gRPC listener,
// in bytes as HTTP/2 counts them (SETTINGS_MAX_HEADER_LIST_SIZE).
const rlsMaxHeaderList = 64 << 10

// runRLSCmd is the "rls" command: runRLS until SIGTERM or SIGINT.
var runRLSCmd = untilStopped(runRLS)

// runRLS runs the rate-limit service until ctx ends, then stops the gRPC
// server gracefully, closes the watcher and the engine (which flushes the
// store) and returns 0. ready, if not nil, is called with the listeners'
// addresses once both are bound (admin is empty without --admin). The
// start-up and the shutdown are process's (process.go); runRLS supplies the
// RateLimitService and its configuration source, files or a control plane.
//
// It reads as its steps: the flags (and envoyproxy/ratelimit's
// environment), the configuration, the store, the service over them, then
// the listeners until ctx ends. A reload puts a new envoyrls.Config in
// force with one atomic store (envoyrls.Server.SetConfig): the domains and
// their limits are all it changes, and a call decides under the one it
// took.
func runRLS(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(grpcAddr, admin string)) int {
	p := newProcess("sluice rls", stderr)
	f, status, ok := parseRLSFlags(p, args, stdout)
	if !ok {
		return status
	}
	cfg, xopts, status, ok := f.load(p)
	if !ok {
		return status
	}
	bf, status, ok := f.storeFlags(p)
	if !ok {
		return status
	}
	tlsCfg, status, ok := p.checkListeners(f.tls, []string{"h2"}, f.admin, f.adminTokenFile)
	if !ok {
		return status
	}
	if status, ok := p.openEngine(bf, nil); !ok {
		return status
	}
	defer p.close()
	svc, status, ok := newRLSService(ctx, p, f, cfg, xopts, tlsCfg)
	if !ok {
		return status
	}
	defer svc.src.Close()
	return svc.run(ctx, p, f, cfg, bf, ready)
}

// rlsFlags are rls's command line, envoyproxy/ratelimit's environment
// under it, checked.
type rlsFlags struct {
	config, grpc                              string // --config (or the environment's), --grpc
	admin, adminTokenFile                     string
	adminHosts                                []string // --admin-host, split at commas
	headers                                   envoyrls.Headers
	shadowHeaders, shadowMode                 bool
	quotaMode, dynamicMetadata                bool
	nearRatio                                 float64
	reloadSettle                              time.Duration
	loadOpts                                  envoyrls.LoadOptions // --merge-domains
	maxDescriptors, maxEntries, maxValueBytes int
	tls                                       tlsFlags
	storePath                                 string        // --store
	store                                     *backendFlags // the store flags given
	xds                                       xdsFlags
	env                                       rlsEnv
}

// parseRLSFlags parses and checks rls's command line, with
// envoyproxy/ratelimit's environment under the flags. ok is false when the
// command must exit with status (--help, or a usage error).
func parseRLSFlags(p *process, args []string, stdout io.Writer) (f rlsFlags, status int, ok bool) {
	fs := flag.NewFlagSet("rls", flag.ContinueOnError)
	fs.SetOutput(p.errw)
	configPath := fs.String("config", "", "the configuration `file or directory` (envoyproxy/ratelimit's YAML); this or --xds is required")
	grpcAddr := fs.String("grpc", "", "the `address` of the gRPC listener, such as :8081; required")
	admin, adminTokenFile := addAdminFlags(fs, "/config")
	adminHosts := addAdminHostFlag(fs)
	headersFlag := fs.String("headers", "both", "the rate-limit `headers` each response asks Envoy to add: both (IETF RateLimit-Policy and RateLimit, and X-RateLimit-*), ietf, x-ratelimit, envoy (envoyproxy/ratelimit's own, as LIMIT_RESPONSE_HEADERS_ENABLED) or none")
	shadowHeaders := fs.Bool("shadow-headers", false, "let shadow_mode limits appear in the rate-limit headers")
	shadowMode := fs.Bool("shadow-mode", false, "put every limit in shadow mode: decide and count, always answer OK")
	quotaMode := fs.Bool("quota-mode", false, "put every limit in quota mode: past its quota a limit answers OK and is named in the dynamic metadata (envoyproxy/ratelimit's QUOTA_MODE)")
	dynamicMetadata := fs.Bool("dynamic-metadata", false, "return the request as dynamic metadata with each response, as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA")
	nearRatio := fs.Float64("near-limit-ratio", envoyrls.NearLimitRatio, "the `share` of a limit past which allowed hits count as near it in sluice_rls_near_limit_total, in (0, 1] (envoyproxy/ratelimit's NEAR_LIMIT_RATIO)")
	reloadSettle := addReloadSettleFlag(fs)
	calendarMonth := fs.Bool("calendar-month", false, "count every fixed_window and sliding_counter limit of unit month in UTC calendar months, not 30 days (envoyproxy/ratelimit's USE_CALENDAR_MONTH_RATE_LIMIT); a limit's own calendar: true and timezone are kept")
	mergeDomains := fs.Bool("merge-domains", false, "read several files of one domain as one, their top-level descriptors together (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); without it two files of one domain are an error")
	maxDescriptors := fs.Int("max-descriptors", envoyrls.DefaultMaxDescriptors, "the most `descriptors` one request may carry; a request with more is answered INVALID_ARGUMENT")
	maxEntries := fs.Int("max-entries", envoyrls.DefaultMaxEntries, "the most `entries` one descriptor may carry; more is answered INVALID_ARGUMENT")
	maxValueBytes := fs.Int("max-value-bytes", envoyrls.DefaultMaxValueBytes, "the longest domain, entry key or entry value, in `bytes`; a longer one is answered INVALID_ARGUMENT (keep it above Envoy's max_request_headers_kb: Envoy lets a refused call's request pass unless failure_mode_deny)")
	tlsf := addTLSFlags(fs, "the gRPC listener")
	storePath := addStoreFileFlag(fs)
	storeFlagsGiven := addBackendFlags(fs)
	xf := addXDSFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), rlsUsage)
		fs.PrintDefaults()
	}
	if status, done := parseArgs(fs, args, stdout); done {
		return f, status, false
	}
	fail := func(format string, a ...any) (rlsFlags, int, bool) { return f, p.fail(2, format, a...), false }
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	env, err := readRLSEnv(os.Getenv)
	if err != nil {
		return fail("%v", err)
	}
	if env.xds.on && !given["config"] {
		xf.over(env.xds, given)
	} else if !given["config"] && !given["xds"] && env.config != "" {
		*configPath = env.config
	}
	if !given["grpc"] && env.grpc != "" {
		*grpcAddr = env.grpc
	}
	if !given["shadow-mode"] && env.shadowMode {
		*shadowMode = true
	}
	if !given["quota-mode"] && env.quotaMode {
		*quotaMode = true
	}
	if !given["dynamic-metadata"] && env.metadata {
		*dynamicMetadata = true
	}
	if !given["near-limit-ratio"] && env.nearRatio != 0 {
		*nearRatio = env.nearRatio
	}
	if !given["calendar-month"] && env.calendarMonth {
		*calendarMonth = true
	}
	if !given["merge-domains"] && env.merge {
		*mergeDomains = true
	}
	for i, f := range [...]struct {
		name string
		to   *string
	}{{"tls-cert", tlsf.cert}, {"tls-key", tlsf.key}, {"tls-client-ca", tlsf.clientCA}} {
		if !given[f.name] && env.tls[i] != "" {
			*f.to = env.tls[i]
		}
	}
	if env.tlsOn && (*tlsf.cert == "" || *tlsf.key == "") {
		return fail("GRPC_SERVER_USE_TLS=true: give GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY (or --tls-cert and --tls-key)")
	}
	if !given["headers"] && env.headers {
		*headersFlag = string(envoyrls.HeadersEnvoy)
	}
	switch {
	case fs.NArg() > 0:
		return fail("unexpected argument %q", fs.Arg(0))
	case *configPath == "" && *xf.server == "":
		return fail("--config (or --xds) is required")
	case *configPath != "" && *xf.server != "":
		return fail("--config and --xds: give one; the configuration comes from files or from a control plane")
	case *grpcAddr == "":
		return fail("--grpc is required")
	case *adminTokenFile != "" && *admin == "":
		return fail("--admin-token-file: only with --admin")
	case len(*adminHosts) > 0 && *admin == "":
		return fail("--admin-host: only with --admin")
	case *reloadSettle <= 0:
		return fail("--reload-settle %s: want a positive duration", *reloadSettle)
	case !(*nearRatio > 0 && *nearRatio <= 1):
		return fail("--near-limit-ratio %v: want a share of the limit in (0, 1], such as 0.8", *nearRatio)
	case *maxDescriptors < 1:
		return fail("--max-descriptors %d: want at least 1", *maxDescriptors)
	case *maxEntries < 1:
		return fail("--max-entries %d: want at least 1", *maxEntries)
	case *maxValueBytes < 1:
		return fail("--max-value-bytes %d: want at least 1", *maxValueBytes)
	}
	if _, _, err := net.SplitHostPort(*grpcAddr); err != nil {
		return fail("--grpc %s: want host:port, or :port for every address", *grpcAddr)
	}
	hosts := splitHosts(*adminHosts)
	if err := checkAdminHosts("--admin-host", hosts); err != nil {
		return fail("%v", err)
	}
	headers, err := envoyrls.ParseHeaders(*headersFlag)
	if err != nil {
		return fail("--headers: %v", err)
	}
	return rlsFlags{
		config: *configPath, grpc: *grpcAddr,
		admin: *admin, adminTokenFile: *adminTokenFile, adminHosts: hosts,
		headers: headers, shadowHeaders: *shadowHeaders, shadowMode: *shadowMode,
		quotaMode: *quotaMode, dynamicMetadata: *dynamicMetadata, nearRatio: *nearRatio,
		reloadSettle: *reloadSettle, loadOpts: envoyrls.LoadOptions{MergeDomains: *mergeDomains, CalendarMonth: *calendarMonth},
		maxDescriptors: *maxDescriptors, maxEntries: *maxEntries, maxValueBytes: *maxValueBytes,
		tls: tlsf, storePath: *storePath, store: storeFlagsGiven, xds: xf, env: env,
	}, 0, true
}

// load reads the configuration files, or, from a control plane, returns
// the xDS client's options and a nil configuration (none is in force until
// the first push). ok is false when the command must exit with status.
func (f *rlsFlags) load(p *process) (cfg *envoyrls.Config, xopts xds.Options, status int, ok bool) {
	var err error
	if *f.xds.server != "" {
		if xopts, err = f.xds.options(f.env.xds); err != nil {
			return nil, xopts, p.fail(2, "%v", err), false
		}
		xopts.Load = f.loadOpts
		return nil, xopts, 0, true
	}
	if cfg, err = rlsfile.LoadWith(f.config, f.loadOpts); err != nil {
		return nil, xopts, p.fail(2, "%v", err), false // a *config.Error names file:line and the field
	}
	if files, err := rlsfile.Files(f.config); err == nil {
		p.log.Info("sluice rls: configuration read", "files", strings.Join(files, ","), "domains", strings.Join(cfg.Domains(), ","))
	}
	return cfg, xopts, 0, true
}

// storeFlags returns the store: --store's file, or else
// envoyproxy/ratelimit's REDIS_* environment, the store flags over either.
// ok is false when the command must exit with status.
func (f *rlsFlags) storeFlags(p *process) (bf backendFlags, status int, ok bool) {
	bf = *f.store
	if f.storePath != "" {
		fileStore, err := storeFile(f.storePath)
		if err != nil {
			return bf, p.fail(2, "%v", err), false
		}
		return f.store.over(fileStore), 0, true
	}
	if !f.store.given["backend"] {
		if f.env.redisErr != nil {
			return bf, p.fail(2, "%v", f.env.redisErr), false
		}
		if f.env.redis != nil {
			bf = f.store.over(backendFlags{name: config.BackendRedis, redis: *f.env.redis, from: "envoyproxy/ratelimit's REDIS_URL"})
		}
	}
	return bf, 0, true
}

// rlsService is the rate-limit service over p's engine: the
// RateLimitService, its configuration source and the gRPC server with its
// health service.
type rlsService struct {
	srv     *envoyrls.Server
	counts  *envoyrls.Metrics
	reloads *metrics.Metrics // the reload and engine counters
	src     *rlsConfigSource // closed by run, or by the caller on its way out
	gs      *grpc.Server
	hs      *health.Server
}

// newRLSService builds the service over p's engine, with cfg in force (nil
// under a control plane, until its first push), and starts its
// configuration source and its health reports, which stop when ctx ends.
// ok is false when the command must exit with status; otherwise close
// the source after run.
func newRLSService(ctx context.Context, p *process, f rlsFlags, cfg *envoyrls.Config, xopts xds.Options, tlsCfg *tls.Config) (s *rlsService, status int, ok bool) {
	s = &rlsService{counts: envoyrls.NewMetrics(), reloads: metrics.New(nil)}
	for _, note := range f.env.notes {
		p.log.Info("sluice rls: from envoyproxy/ratelimit's environment", "note", note)
	}
	var err error
	s.srv, err = envoyrls.NewServer(cfg, envoyrls.Options{
		Engine: p.eng, Metrics: s.counts, Headers: f.headers, EnvoyHeaderNames: f.env.headerNames, DynamicMetadata: f.dynamicMetadata, QuotaMode: f.quotaMode, ShadowHeaders: f.shadowHeaders, ShadowMode: f.shadowMode, Logger: p.log,
		NearLimitRatio: f.nearRatio, MaxDescriptors: f.maxDescriptors, MaxEntries: f.maxEntries, MaxValueBytes: f.maxValueBytes,
	})
	if err != nil {
		return nil, p.fail(2, "%v", err), false
	}
	if s.src, err = startRLSConfigSource(s.srv, f.config, f.loadOpts, f.reloadSettle, xopts, p.log, s.reloads); err != nil {
		return nil, p.fail(1, "%v", err), false
	}

	// Envoy's calls carry a few small headers (its initial_metadata
	// included); grpc-go would take up to 16 MiB of them per call.
	gopts := []grpc.ServerOption{grpc.MaxHeaderListSize(rlsMaxHeaderList)}
	if tlsCfg != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	s.gs = grpc.NewServer(gopts...)
	rlspb.RegisterRateLimitServiceServer(s.gs, s.srv)
	s.hs = health.NewServer()
	// Serving once the configuration is in force, and not while the
	// durable store fails to write (storehealth.go).
	gh := &grpcHealth{eng: p.eng, set: func(serving bool) {
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if serving {
			st = healthpb.HealthCheckResponse_SERVING
		}
		s.hs.SetServingStatus("", st)
		s.hs.SetServingStatus(rlspb.RateLimitService_ServiceDesc.ServiceName, st)
	}}
	gh.update()
	go gh.watch(ctx)
	if s.src.ready == nil {
		gh.markReady()
	} else {
		// Not serving until the control plane's first configuration
		// is in force (envoyproxy/ratelimit's
		// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED).
		go func() {
			select {
			case <-s.src.ready:
				gh.markReady()
			case <-ctx.Done():
			}
		}()
	}
	healthpb.RegisterHealthServer(s.gs, s.hs)
	reflection.Register(s.gs)
	return s, 0, true
}

// run serves the service on --grpc and the admin endpoints on --admin
// until ctx ends; then it stops the configuration source (process.run).
// cfg is the configuration at start, bf the store, for the "listening"
// line.
func (s *rlsService) run(ctx context.Context, p *process, f rlsFlags, cfg *envoyrls.Config, bf backendFlags, ready func(grpcAddr, admin string)) int {
	return p.run(ctx, listener{
		flag:  "grpc",
		addr:  f.grpc,
		serve: s.gs.Serve,
		drain: func(ctx context.Context) error {
			s.hs.Shutdown() // health checks answer NOT_SERVING while the calls drain
			stopped := make(chan struct{})
			go func() { s.gs.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-ctx.Done():
				s.gs.Stop()
				<-stopped
			}
			return nil
		},
		stop: func() {
			if err := s.src.Close(); err != nil {
				p.log.Warn("sluice rls: closing the configuration source", "err", err)
			}
		},
		attrs: append([]any{"config", s.src.name, "domains", strings.Join(cfg.Domains(), ",")}, storeAttrs(bf)...),
	}, adminListener{
		addr:      f.admin,
		tokenFile: f.adminTokenFile,
		hosts:     f.adminHosts,
		handler: func() http.Handler {
			keys := &rlsAdminKeys{srv: s.srv, eng: p.eng, log: p.log}
			return keys.mount(rlsAdminHandler(s.srv, s.counts, s.reloads, p.eng, storeCollectors(p.store)...))
		},
	}, ready)
}

// rlsLimitJSON is one limit as /config shows it.
type rlsLimitJSON struct {
	Path            string   `json:"path"`
	Name            string   `json:"name,omitempty"`
	Unlimited       bool     `json:"unlimited,omitempty"`
	RequestsPerUnit uint32   `json:"requests_per_unit"`
	Window          string   `json:"window,omitempty"`
	Algorithm       string   `json:"algorithm,omitempty"`
	Burst           int64    `json:"burst,omitempty"`
	ShadowMode      bool     `json:"shadow_mode,omitempty"`
	QuotaMode       bool     `json:"quota_mode,omitempty"`
	Replaces        []string `json:"replaces,omitempty"`
}

// rlsAdminHandler serves /metrics, /healthz and /config; /metrics
// also serves the collectors in store.
func rlsAdminHandler(srv *envoyrls.Server, counts *envoyrls.Metrics, reloads *metrics.Metrics, eng *engine.Engine, store ...prometheus.Collector) http.Handler {
	preg := prometheus.NewRegistry()
	preg.MustRegister(rlsmetrics.NewCollector(counts), reloads.Collector(eng))
	preg.MustRegister(store...)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(preg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", healthz(eng))
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) {
		cfg := srv.Config()
		out := map[string][]rlsLimitJSON{}
		for _, name := range cfg.Domains() {
			ls := []rlsLimitJSON{}
			for _, l := range cfg.Domain(name).Limits() {
				j := rlsLimitJSON{Path: l.Path, Name: l.Name, Unlimited: l.Unlimited, RequestsPerUnit: l.RequestsPerUnit,
					Algorithm: string(l.Algorithm), Burst: l.Burst, ShadowMode: l.Shadow, QuotaMode: l.Quota, Replaces: l.Replaces}
				if !l.Unlimited {
					j.Window = l.Window.String()
				}
				ls = append(ls, j)
			}
			out[name] = ls
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(out)
	})
	return mux
}

// rlsAdminKeys serves /v1/reset and /v1/keys for sluice rls, where a
// caller's budget is the one a descriptor has under the limit it matches.
// The operator names it as Envoy sends it:
//
//	domain=DOMAIN&entry=KEY=VALUE&entry=KEY=VALUE…
//
// the request's domain and its descriptor's entries in order, each
// KEY=VALUE split at the first '=' (a key-only level of the configuration
// is matched by any value, so give the value Envoy sends). The descriptor
// is matched as ShouldRateLimit matches it (envoyrls.Config.Match), so the
// budget reset or shown is exactly the one the next request with that
// descriptor spends. POST /v1/reset takes the same fields as a form, or
// JSON {"domain": …, "descriptor": [{"key": …, "value": …}, …]}.
type rlsAdminKeys struct {
	srv *envoyrls.Server
	eng *engine.Engine
	log *slog.Logger
}

// mount returns a handler serving the caller endpoints and passing every
// other request to rest.
func (a *rlsAdminKeys) mount(rest http.Handler) http.Handler {
	return mountCallerEndpoints(a.reset, a.keys, rest)
}

// rlsEntry is one descriptor entry of a /v1/reset JSON body.
type rlsEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// target finds the limit and key of a domain and descriptor. ok is false
// when it has answered the request.
func (a *rlsAdminKeys) target(w http.ResponseWriter, domain string, desc []rlsEntry) (envoyrls.Match, bool) {
	if domain == "" || len(desc) == 0 {
		adminError(w, http.StatusBadRequest, "give domain and the descriptor's entries (entry=KEY=VALUE, in order)")
		return envoyrls.Match{}, false
	}
	cfg := a.srv.Config()
	if cfg.Domain(domain) == nil {
		adminError(w, http.StatusNotFound, "no domain %q is configured", domain)
		return envoyrls.Match{}, false
	}
	entries := make([]*rlv3.RateLimitDescriptor_Entry, len(desc))
	for i, e := range desc {
		if e.Key == "" {
			adminError(w, http.StatusBadRequest, "entry %d: empty key", i+1)
			return envoyrls.Match{}, false
		}
		entries[i] = &rlv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value}
	}
	m := cfg.Match(domain, entries)
	switch {
	case m.Limit == nil:
		adminError(w, http.StatusNotFound, "no limit of domain %q matches the descriptor", domain)
		return m, false
	case m.Limit.EngineLimit().Algorithm == nil:
		adminError(w, http.StatusConflict, "limit %s counts nothing (unlimited, or requests_per_unit 0)", m.Limit.Path)
		return m, false
	}
	return m, true
}

// entriesOf reads entry=KEY=VALUE fields.
func entriesOf(vs []string) []rlsEntry {
	out := make([]rlsEntry, 0, len(vs))
	for _, v := range vs {
		k, val, _ := strings.Cut(v, "=")
		out = append(out, rlsEntry{Key: k, Value: val})
	}
	return out
}

// reset is POST /v1/reset.
func (a *rlsAdminKeys) reset(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxAdminBody)
	var in struct {
		Domain     string     `json:"domain"`
		Descriptor []rlsEntry `json:"descriptor"`
	}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "application/json" {
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			adminError(w, http.StatusBadRequest, `want a JSON object {"domain": …, "descriptor": [{"key": …, "value": …}]}`)
			return
		}
	} else {
		if err := r.ParseForm(); err != nil {
			adminError(w, http.StatusBadRequest, "want a form of domain and entry=KEY=VALUE fields")
			return
		}
		in.Domain, in.Descriptor = r.PostForm.Get("domain"), entriesOf(r.PostForm["entry"])
	}
	m, ok := a.target(w, in.Domain, in.Descriptor)
	if !ok {
		return
	}
	_, tokenGiven := bearer(r)
	removed, err := resetRecord(r.Context(), a.eng, m.Limit.EngineLimit(), m.Key)
	if err != nil {
		a.log.Error("sluice rls: admin reset failed", "limit", m.Limit.Path, "key", m.Key, "remote", r.RemoteAddr, "token", tokenGiven, "err", err)
		adminError(w, http.StatusServiceUnavailable, "the store could not reset the key")
		return
	}
	a.log.Info("sluice rls: admin reset", "limit", m.Limit.Path, "key", m.Key, "remote", r.RemoteAddr, "token", tokenGiven, "removed", removed)
	answerReset(w, removed, map[string]any{"domain": in.Domain, "limit": m.Limit.Path, "key": m.Key})
}

// rlsKeyStateJSON is the body of sluice rls's GET /v1/keys: serve's, with
// the domain; Rule is the limit's path, Limit its requests_per_unit.
type rlsKeyStateJSON struct {
	Domain string `json:"domain"`
	keyStateJSON
}

// keys is GET /v1/keys.
func (a *rlsAdminKeys) keys(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	m, ok := a.target(w, q.Get("domain"), entriesOf(q["entry"]))
	if !ok {
		return
	}
	l := m.Limit
	out := rlsKeyStateJSON{Domain: l.Domain, keyStateJSON: keyStateJSON{Rule: l.Path, Key: m.Key, Algorithm: string(l.Algorithm),
		Limit: int64(l.RequestsPerUnit), Window: l.Window.String(), Burst: l.Burst, Cost: 1}}
	if err := out.read(r.Context(), a.eng, l.EngineLimit(), m.Key, 1); err != nil {
		keyStoreError(w, a.log, "sluice rls: admin keys", err)
		return
	}
	writeJSON(w, out)
}
