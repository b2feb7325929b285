package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	confv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice/envoyrls/xds/xdstest"
)

// perDayConfig is one domain with a per-day limit of n on key "user".
func perDayConfig(n uint32) *confv3.RateLimitConfig {
	return &confv3.RateLimitConfig{Name: "api", Domain: "api", Descriptors: []*confv3.RateLimitDescriptor{
		{Key: "user", RateLimit: &confv3.RateLimitPolicy{Unit: confv3.RateLimitUnit_DAY, RequestsPerUnit: n}},
	}}
}

// A real `sluice rls` configured from go-control-plane's xDS server by
// envoyproxy/ratelimit's environment: it is not serving until the first
// push; a push is in force without a restart and keeps what callers spent;
// a bad push is NACKed and logged, the one in force staying; the control
// plane restarting keeps the configuration, and the stream comes back.
func TestRLSProcessXDS(t *testing.T) {
	t.Parallel()
	waitAwayFromDayBoundary(t)
	cp := xdstest.Start(t, "gateway-eu")
	p := startRLSEnv(t, []string{
		"CONFIG_TYPE=GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL=" + cp.Addr(),
		"CONFIG_GRPC_XDS_NODE_ID=gateway-eu",
		"CONFIG_GRPC_XDS_NODE_METADATA=zone=eu-1",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=50ms",
		"XDS_CLIENT_BACKOFF_MAX_INTERVAL=200ms",
	})
	health := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		r, err := healthpb.NewHealthClient(p.conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	cp.WaitRequest(20*time.Second, "opening the stream", func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetNode().GetId() == "gateway-eu" && r.GetNode().GetMetadata().GetFields()["zone"].GetStringValue() == "eu-1"
	})
	if got := health(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health before the first push: %v, want NOT_SERVING", got)
	}
	if _, err := p.client.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{rd("user", "ann")}}); status.Code(err).String() != "Unavailable" {
		t.Errorf("a call before the first push: %v, want Unavailable", err)
	}

	cp.Push("1", perDayConfig(3))
	p.waitLog(t, "configuration from the control plane in force", 1)
	// The health service hears of the first configuration from a
	// goroutine of its own, which a loaded machine runs after the log line.
	got := health()
	for deadline := time.Now().Add(10 * time.Second); got != healthpb.HealthCheckResponse_SERVING && time.Now().Before(deadline); got = health() {
		time.Sleep(10 * time.Millisecond)
	}
	if got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health 10s after the first push: %v, want SERVING", got)
	}
	spend := func(when string, want ...string) {
		t.Helper()
		for i, w := range want {
			if got := rlsAnswer(p.ask(t, "api", 0, rd("user", "ann"))); got != w {
				t.Fatalf("%s, ann's request %d: %s, want %s", when, i+1, got, w)
			}
		}
	}
	spend("under version 1 (3 a day)", "OK: OK", "OK: OK", "OK: OK", "OVER_LIMIT: OVER_LIMIT")

	cp.Push("2", perDayConfig(5))
	p.waitLog(t, "configuration from the control plane in force", 2)
	spend("under version 2 (5 a day, 3 spent)", "OK: OK", "OK: OK", "OVER_LIMIT: OVER_LIMIT")

	bad := perDayConfig(9)
	bad.Descriptors[0].RateLimit.Unit = confv3.RateLimitUnit_UNKNOWN
	cp.Push("3", bad)
	p.waitLog(t, "configuration from the control plane rejected", 1)
	if !strings.Contains(p.stderr.String(), "xds:api: descriptors[0].rate_limit.unit") {
		t.Errorf("the rejection does not name the resource and field:\n%s", p.stderr)
	}
	cp.WaitRequest(20*time.Second, "NACKing version 3", func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetErrorDetail() != nil && r.GetVersionInfo() == "2"
	})
	spend("after the bad push", "OVER_LIMIT: OVER_LIMIT")

	// The control plane goes away: the configuration stays; it comes back
	// with a new version, which the reopened stream takes.
	cp.Stop()
	spend("with the control plane away", "OVER_LIMIT: OVER_LIMIT")
	cp.Push("4", perDayConfig(6))
	cp.Restart()
	p.waitLog(t, "configuration from the control plane in force", 3)
	spend("under version 4 (6 a day, 5 spent)", "OK: OK", "OVER_LIMIT: OVER_LIMIT")

	// SIGHUP, which reloads files, leaves the process running.
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "nothing to reload", 1)
	spend("after SIGHUP", "OVER_LIMIT: OVER_LIMIT")
	if got := metricValue(t, p.admin, `sluice_config_reloads_total{result="error"}`); got != 1 {
		t.Errorf("rejected pushes counted: %v, want 1", got)
	}
	p.stop(t)
}

// Mistakes in the xDS settings exit 2 naming the setting.
func TestRLSXDSUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := dir + "/api.yaml"
	writeFile(t, file, "domain: api\n")
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--config", file, "--xds", "127.0.0.1:1"}, "--config and --xds: give one"},
		{nil, []string{"--xds", "127.0.0.1:1", "--xds-node-metadata", "zone"}, `--xds-node-metadata (CONFIG_GRPC_XDS_NODE_METADATA): "zone" is not key=value`},
		{nil, []string{"--xds", "127.0.0.1:1", "--xds-tls-cert", file}, "--xds-tls-cert and --xds-tls-key: give both"},
		{[]string{"CONFIG_TYPE=GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=soon"}, nil, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=soon: want a positive duration"},
		{[]string{"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS=yes please"}, nil, "CONFIG_GRPC_XDS_SERVER_USE_TLS=yes please: want true or false"},
		{[]string{"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + file}, nil, "holds no PEM certificate"},
	} {
		cmd := exec.Command(buildBinary(t), append([]string{"rls", "--grpc", "127.0.0.1:0"}, c.args...)...)
		cmd.Env = append(os.Environ(), c.env...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), c.want) {
			t.Errorf("%v %v: %v %s, want exit 2 saying %q", c.env, c.args, err, out, c.want)
		}
	}
}
