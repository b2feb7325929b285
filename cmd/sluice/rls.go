package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/metrics"
)

// rlsUsage is what "sluice rls --help" prints before the flags.
const rlsUsage = `Usage: sluice rls --config FILE_OR_DIR --grpc ADDR [--admin ADDR]
       [--backend memory|pebble|bolt|redis --dir DIR --durability sync|interval
        --redis-addr HOST:PORT[,HOST:PORT...] --redis-prefix P]
       [--headers both|ietf|x-ratelimit|none --shadow-headers --shadow-mode]

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

A store failure answers UNAVAILABLE: Envoy then lets the request pass,
unless its filter sets failure_mode_deny.

Reloading: the configuration is watched (renames, symbolic-link swaps and
ConfigMap updates included) and reloaded on SIGHUP; one that does not load
is rejected whole and logged with its file, line and field, and the
configuration in force stays. A limit that keeps its place keeps what
callers spent under it.

Signals: SIGHUP reloads; SIGTERM or SIGINT stops accepting, finishes the
calls in flight (up to 10s), flushes and closes the store, and exits 0.

The gRPC listener also serves grpc.health.v1 and server reflection.
Admin endpoints (on --admin only):
  /metrics  Prometheus metrics: per domain and descriptor the hits, those
            over the limit, near it, within it, and shadow_mode would-be
            denials; requests by overall code; reloads; the engine's
  /healthz  "ok"
  /config   the domains and limits in force, as JSON

Exit status: 2 for a usage error or an invalid configuration (named by
file, line and field), 1 for any other failure.

Flags:
`

// rlsShutdownTimeout bounds how long a stopping rls waits for the calls in
// flight.
const rlsShutdownTimeout = 10 * time.Second

// runRLSCmd is the "rls" command: runRLS until SIGTERM or SIGINT.
func runRLSCmd(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return runRLS(ctx, args, stdout, stderr, nil)
}

// runRLS runs the rate-limit service until ctx ends, then stops the gRPC
// server gracefully, closes the watcher and the engine (which flushes the
// store) and returns 0. ready, if not nil, is called with the listeners'
// addresses once both are bound (admin is empty without --admin).
func runRLS(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(grpcAddr, admin string)) int {
	errw := &lockedWriter{w: stderr}
	fs := flag.NewFlagSet("rls", flag.ContinueOnError)
	fs.SetOutput(errw)
	configPath := fs.String("config", "", "the configuration `file or directory` (envoyproxy/ratelimit's YAML); required")
	grpcAddr := fs.String("grpc", "", "the `address` of the gRPC listener, such as :8081; required")
	admin := fs.String("admin", "", "the `address` of the admin listener (/metrics, /healthz, /config); none when empty")
	headersFlag := fs.String("headers", "both", "the rate-limit `headers` each response asks Envoy to add: both (IETF RateLimit-Policy and RateLimit, and X-RateLimit-*), ietf, x-ratelimit or none")
	shadowHeaders := fs.Bool("shadow-headers", false, "let shadow_mode limits appear in the rate-limit headers")
	shadowMode := fs.Bool("shadow-mode", false, "put every limit in shadow mode: decide and count, always answer OK")
	bf := addBackendFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), rlsUsage)
		fs.PrintDefaults()
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			fs.SetOutput(stdout)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(status int, format string, a ...any) int {
		fmt.Fprintf(errw, "sluice rls: "+format+"\n", a...)
		return status
	}
	switch {
	case fs.NArg() > 0:
		return fail(2, "unexpected argument %q", fs.Arg(0))
	case *configPath == "":
		return fail(2, "--config is required")
	case *grpcAddr == "":
		return fail(2, "--grpc is required")
	}
	headers, err := envoyrls.ParseHeaders(*headersFlag)
	if err != nil {
		return fail(2, "--headers: %v", err)
	}
	cfg, err := envoyrls.Load(*configPath)
	if err != nil {
		return fail(2, "%v", err) // a *config.Error names file:line and the field
	}
	logger := slog.New(slog.NewTextHandler(errw, nil))

	if bf.name == config.BackendRedis {
		setRedisLogger(logger)
	}
	b, opts, err := openBackend(*bf)
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			return fail(2, "%v", err)
		}
		return fail(1, "opening the %s store: %v", bf.name, err)
	}
	opts.Logger = logger
	eng, err := engine.New(b, &opts)
	if err != nil {
		b.Close()
		return fail(1, "starting the engine: %v", err)
	}
	defer eng.Close()

	counts := envoyrls.NewMetrics()
	reloads := metrics.New(nil) // the reload and engine counters
	srv, err := envoyrls.NewServer(cfg, envoyrls.Options{
		Engine: eng, Metrics: counts, Headers: headers, ShadowHeaders: *shadowHeaders, ShadowMode: *shadowMode, Logger: logger,
	})
	if err != nil {
		return fail(2, "%v", err)
	}
	w, err := envoyrls.Watch(*configPath, srv, envoyrls.WatchOptions{
		Logger:   logger,
		SIGHUP:   true,
		OnReload: func(_ *envoyrls.Config, err error) { reloads.ObserveReload(err) },
	})
	if err != nil {
		return fail(1, "watching %s: %v", *configPath, err)
	}
	defer w.Close()

	gs := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(gs, srv)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(rlspb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)

	ln, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		return fail(1, "--grpc: %v", err)
	}
	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(ln) }()
	var adminSrv *http.Server
	adminAddr := ""
	if *admin != "" {
		aln, err := net.Listen("tcp", *admin)
		if err != nil {
			gs.Stop()
			return fail(1, "--admin: %v", err)
		}
		adminAddr = aln.Addr().String()
		adminSrv = &http.Server{Handler: rlsAdminHandler(srv, counts, reloads, eng), ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- adminSrv.Serve(aln) }()
	}
	storeAttrs := []any{"store", bf.name}
	switch bf.name {
	case config.BackendPebble, config.BackendBolt:
		storeAttrs = append(storeAttrs, "dir", bf.dir)
	case config.BackendRedis:
		storeAttrs = append(storeAttrs, "redis", strings.Join(bf.redis.Addrs, ","), "key_prefix", bf.redis.KeyPrefix)
	}
	logger.Info("sluice rls: listening", append([]any{"grpc", ln.Addr().String(), "admin", adminAddr,
		"config", *configPath, "domains", strings.Join(cfg.Domains(), ",")}, storeAttrs...)...)
	if ready != nil {
		ready(ln.Addr().String(), adminAddr)
	}

	status := 0
	select {
	case <-ctx.Done():
	case err := <-errc:
		fmt.Fprintf(errw, "sluice rls: %v\n", err)
		status = 1
	}
	hs.Shutdown() // health checks answer NOT_SERVING while the calls drain
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(rlsShutdownTimeout):
		gs.Stop()
		<-stopped
	}
	if adminSrv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), rlsShutdownTimeout)
		adminSrv.Shutdown(sctx)
		cancel()
	}
	if err := w.Close(); err != nil {
		logger.Warn("sluice rls: closing the configuration watcher", "err", err)
	}
	if err := eng.Close(); err != nil {
		fmt.Fprintf(errw, "sluice rls: closing the store: %v\n", err)
		status = 1
	}
	if status == 0 {
		logger.Info("sluice rls: stopped")
	}
	return status
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

// rlsAdminHandler serves /metrics, /healthz and /config.
func rlsAdminHandler(srv *envoyrls.Server, counts *envoyrls.Metrics, reloads *metrics.Metrics, eng *engine.Engine) http.Handler {
	preg := prometheus.NewRegistry()
	preg.MustRegister(counts, reloads.Collector(eng))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(preg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) {
		cfg := srv.Config()
		out := map[string][]rlsLimitJSON{}
		for _, name := range cfg.Domains() {
			ls := []rlsLimitJSON{}
			for _, l := range cfg.Domain(name).Limits() {
				j := rlsLimitJSON{Path: l.Path, Name: l.Name, Unlimited: l.Unlimited, RequestsPerUnit: l.RequestsPerUnit,
					Algorithm: l.Algorithm, Burst: l.Burst, ShadowMode: l.Shadow, QuotaMode: l.Quota, Replaces: l.Replaces}
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
