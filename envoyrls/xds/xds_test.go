package xds_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	confv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/envoyrls/xds"
	"github.com/sluice-go/sluice/envoyrls/xds/xdstest"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// perDay is a domain with one per-day limit on key "user".
func perDay(name, domain string, n uint32) *confv3.RateLimitConfig {
	return &confv3.RateLimitConfig{Name: name, Domain: domain, Descriptors: []*confv3.RateLimitDescriptor{
		{Key: "user", RateLimit: &confv3.RateLimitPolicy{Unit: confv3.RateLimitUnit_DAY, RequestsPerUnit: n}},
	}}
}

// updates records what Options.OnUpdate is told.
type updates struct {
	mu    sync.Mutex
	seen  map[string]error
	count map[string]int
	c     chan struct{}
}

func newUpdates() *updates {
	return &updates{seen: map[string]error{}, count: map[string]int{}, c: make(chan struct{}, 100)}
}

func (u *updates) times(version string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.count[version]
}

func (u *updates) on(version string, _ *envoyrls.Config, err error) {
	u.mu.Lock()
	u.seen[version] = err
	u.count[version]++
	u.mu.Unlock()
	u.c <- struct{}{}
}

// wait waits for version's update and returns its error.
func (u *updates) wait(t *testing.T, version string) error {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		u.mu.Lock()
		err, ok := u.seen[version]
		u.mu.Unlock()
		if ok {
			return err
		}
		select {
		case <-u.c:
		case <-deadline:
			t.Fatalf("version %s was never applied or refused", version)
		}
	}
}

type fixture struct {
	srv *envoyrls.Server
	cp  *xdstest.ControlPlane
	cl  *xds.Client
	up  *updates
}

func start(t *testing.T, o xds.Options, first ...*confv3.RateLimitConfig) *fixture {
	t.Helper()
	eng, err := engine.New(memory.New(&memory.Options{SweepInterval: -1}), &engine.Options{Clock: engine.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv, err := envoyrls.NewServer(nil, envoyrls.Options{Engine: eng})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv, up: newUpdates()}
	f.cp = xdstest.Start(t, "rls-test")
	if first != nil {
		f.cp.Push("1", first...)
	}
	o.Server, o.NodeID, o.OnUpdate = f.cp.Addr(), "rls-test", f.up.on
	if o.Backoff == 0 {
		o.Backoff, o.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	}
	f.cl, err = xds.Start(srv, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.cl.Close() })
	return f
}

func (f *fixture) ask(t *testing.T, domain, user string) string {
	t.Helper()
	r, err := f.srv.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: domain,
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: user}}}}})
	if err != nil {
		return "error: " + status.Code(err).String()
	}
	return r.GetOverallCode().String()
}

func (f *fixture) spend(t *testing.T, domain, user string, want ...string) {
	t.Helper()
	for i, w := range want {
		if got := f.ask(t, domain, user); got != w {
			t.Fatalf("%s's request %d on %s: %s, want %s", user, i+1, domain, got, w)
		}
	}
}

// A pushed configuration is in force without a restart and keeps what
// callers spent; a bad push is NACKed with its reason and the one in force
// stays; a fixed one is taken again.
func TestPushesAreAppliedAndBadOnesRefused(t *testing.T) {
	f := start(t, xds.Options{}, perDay("api", "api", 3))
	if err := f.up.wait(t, "1"); err != nil {
		t.Fatal(err)
	}
	<-f.cl.Ready()
	f.spend(t, "api", "frank", "OK", "OK", "OK", "OVER_LIMIT")
	f.cp.WaitRequest(20*time.Second, "ACKing version 1", func(r *discoveryv3.DiscoveryRequest) bool {
		return r.GetVersionInfo() == "1" && r.GetErrorDetail() == nil && r.GetResponseNonce() != ""
	})

	f.cp.Push("2", perDay("api", "api", 5))
	if err := f.up.wait(t, "2"); err != nil {
		t.Fatal(err)
	}
	f.spend(t, "api", "frank", "OK", "OK", "OVER_LIMIT") // 3 spent of 5 kept

	bad := perDay("api", "api", 5)
	bad.Descriptors[0].RateLimit.Unit = confv3.RateLimitUnit_UNKNOWN
	f.cp.Push("3", bad)
	err := f.up.wait(t, "3")
	var ce *config.Error
	if !errors.As(err, &ce) || ce.File != "xds:api" || ce.Field != "descriptors[0].rate_limit.unit" {
		t.Fatalf("the bad push: %v, want a *config.Error on xds:api's descriptors[0].rate_limit.unit", err)
	}
	nack := f.cp.WaitRequest(20*time.Second, "NACKing version 3", func(r *discoveryv3.DiscoveryRequest) bool { return r.GetErrorDetail() != nil })
	if nack.GetVersionInfo() != "2" || !strings.Contains(nack.GetErrorDetail().GetMessage(), "rate_limit.unit") {
		t.Errorf("the NACK says version %q, %q; want version 2 still in force and the reason", nack.GetVersionInfo(), nack.GetErrorDetail().GetMessage())
	}
	f.spend(t, "api", "frank", "OVER_LIMIT") // 5 of 5 still
	// go-control-plane sends the refused version again at each NACK: the
	// repeat is NACKed again, after RepeatWait, and not reported twice.
	nacks := 0
	f.cp.WaitRequest(20*time.Second, "NACKing version 3 twice", func(r *discoveryv3.DiscoveryRequest) bool {
		if r.GetErrorDetail() != nil {
			nacks++
		}
		return nacks == 2
	})
	if n := f.up.times("3"); n != 1 {
		t.Errorf("the refused version was reported %d times, want 1", n)
	}

	f.cp.Push("4", perDay("api", "api", 6))
	if err := f.up.wait(t, "4"); err != nil {
		t.Fatal(err)
	}
	f.spend(t, "api", "frank", "OK", "OVER_LIMIT")
}

// Before the first configuration every call is Unavailable, as
// envoyproxy/ratelimit's "no rate limit configuration loaded"; Ready is
// closed when one is in force.
func TestNoConfigurationUntilTheFirstPush(t *testing.T) {
	f := start(t, xds.Options{})
	f.cp.WaitRequest(20*time.Second, "opening the stream", func(r *discoveryv3.DiscoveryRequest) bool { return r.GetTypeUrl() == xds.TypeURL })
	if got := f.ask(t, "api", "ann"); got != "error: Unavailable" {
		t.Fatalf("before any configuration: %s, want Unavailable", got)
	}
	select {
	case <-f.cl.Ready():
		t.Fatal("Ready before any configuration")
	default:
	}
	f.cp.Push("1", perDay("api", "api", 1))
	<-f.cl.Ready()
	f.spend(t, "api", "ann", "OK", "OVER_LIMIT")
}

// The control plane going away keeps the configuration in force; the
// client reconnects and takes what it is sent then.
func TestControlPlaneRestart(t *testing.T) {
	f := start(t, xds.Options{}, perDay("api", "api", 2))
	<-f.cl.Ready()
	f.spend(t, "api", "bob", "OK")
	f.cp.Stop()
	f.spend(t, "api", "bob", "OK", "OVER_LIMIT") // still in force, spent kept
	f.cp.Push("2", perDay("api", "api", 4))
	f.cp.Restart()
	if err := f.up.wait(t, "2"); err != nil {
		t.Fatal(err)
	}
	f.spend(t, "api", "bob", "OK", "OK", "OVER_LIMIT")
}

// The node, its metadata and the stream's headers are what the options
// say, as envoyproxy/ratelimit's CONFIG_GRPC_XDS_NODE_ID, _NODE_METADATA
// and _CLIENT_ADDITIONAL_HEADERS send them.
func TestNodeAndHeaders(t *testing.T) {
	f := start(t, xds.Options{NodeMetadata: map[string]string{"zone": "eu-1"}, Headers: map[string]string{"authorization": "Bearer t0k"}}, perDay("api", "api", 1))
	<-f.cl.Ready()
	r := f.cp.Requests()[0]
	if r.GetNode().GetId() != "rls-test" || r.GetNode().GetMetadata().GetFields()["zone"].GetStringValue() != "eu-1" {
		t.Errorf("node %v", r.GetNode())
	}
	if h := f.cp.Headers(); len(h) == 0 || strings.Join(h[0].Get("authorization"), ",") != "Bearer t0k" {
		t.Errorf("stream headers %v", h)
	}
}

// Two resources of one domain are refused unless the domains are merged,
// as files are (MERGE_DOMAIN_CONFIG).
func TestMergeDomains(t *testing.T) {
	a := perDay("a", "api", 1)
	b := &confv3.RateLimitConfig{Name: "b", Domain: "api", Descriptors: []*confv3.RateLimitDescriptor{
		{Key: "team", RateLimit: &confv3.RateLimitPolicy{Unit: confv3.RateLimitUnit_DAY, RequestsPerUnit: 1}},
	}}
	f := start(t, xds.Options{}, a, b)
	if err := f.up.wait(t, "1"); err == nil || !strings.Contains(err.Error(), `duplicate domain "api"`) {
		t.Fatalf("two resources of domain api: %v, want a duplicate domain error", err)
	}
	m := start(t, xds.Options{Load: envoyrls.LoadOptions{MergeDomains: true}}, perDay("a", "api", 1), b)
	if err := m.up.wait(t, "1"); err != nil {
		t.Fatal(err)
	}
	if got := m.srv.Config().Domain("api").Limits(); len(got) != 2 {
		t.Fatalf("merged domain has %d limits, want 2", len(got))
	}
}

// Each field of a RateLimitConfig is read as its YAML twin is: shadow_mode,
// unlimited, name and replaces, nested descriptors, every unit.
func TestDecodeConfigFields(t *testing.T) {
	rc := &confv3.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*confv3.RateLimitDescriptor{
		{Key: "k", Value: "v", ShadowMode: true, DetailedMetric: true, RateLimit: &confv3.RateLimitPolicy{Unit: confv3.RateLimitUnit_MINUTE, RequestsPerUnit: 7, Name: "seven"}},
		{Key: "free", RateLimit: &confv3.RateLimitPolicy{Unlimited: true}},
		{Key: "outer", Descriptors: []*confv3.RateLimitDescriptor{
			{Key: "inner", RateLimit: &confv3.RateLimitPolicy{Unit: confv3.RateLimitUnit_YEAR, RequestsPerUnit: 9, Replaces: []*confv3.RateLimitReplace{{Name: "seven"}}}},
		}},
	}}
	d, err := xds.DecodeConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range d.Limits() {
		got = append(got, fmt.Sprintf("%s %s %d/%v unlimited=%v shadow=%v detailed=%v replaces=%v", l.Path, l.Name, l.RequestsPerUnit, l.Window, l.Unlimited, l.Shadow, l.DetailedMetric, l.Replaces))
	}
	want := []string{
		"d.k_v seven 7/1m0s unlimited=false shadow=true detailed=true replaces=[]",
		"d.free  0/0s unlimited=true shadow=false detailed=false replaces=[]",
		"d.outer.inner  9/8760h0m0s unlimited=false shadow=false detailed=false replaces=[seven]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("limits:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, u := range []confv3.RateLimitUnit{confv3.RateLimitUnit_SECOND, confv3.RateLimitUnit_MINUTE, confv3.RateLimitUnit_HOUR, confv3.RateLimitUnit_DAY, confv3.RateLimitUnit_WEEK, confv3.RateLimitUnit_MONTH, confv3.RateLimitUnit_YEAR} {
		if _, err := xds.DecodeConfig(&confv3.RateLimitConfig{Domain: "d", Descriptors: []*confv3.RateLimitDescriptor{{Key: "k", RateLimit: &confv3.RateLimitPolicy{Unit: u, RequestsPerUnit: 1}}}}); err != nil {
			t.Errorf("unit %v: %v", u, err)
		}
	}
	// What envoyproxy/ratelimit refuses is refused: no domain, a unit on
	// an unlimited limit, a descriptor without a key.
	for name, rc := range map[string]*confv3.RateLimitConfig{
		"domain":                         {Name: "x"},
		"descriptors[0].rate_limit.unit": {Domain: "d", Descriptors: []*confv3.RateLimitDescriptor{{Key: "k", RateLimit: &confv3.RateLimitPolicy{Unlimited: true, Unit: confv3.RateLimitUnit_SECOND}}}},
		"descriptors[0].key":             {Domain: "d", Descriptors: []*confv3.RateLimitDescriptor{{RateLimit: &confv3.RateLimitPolicy{Unit: confv3.RateLimitUnit_SECOND, RequestsPerUnit: 1}}}},
		"descriptors[0].rate_limit.replaces[0].name": {Domain: "d", Descriptors: []*confv3.RateLimitDescriptor{{Key: "k", RateLimit: &confv3.RateLimitPolicy{Unit: confv3.RateLimitUnit_SECOND, RequestsPerUnit: 1, Replaces: []*confv3.RateLimitReplace{{}}}}}},
	} {
		_, err := xds.DecodeConfig(rc)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != name || ce.Line != 0 {
			t.Errorf("%s: %v, want a *config.Error on that field with no line", name, err)
		}
	}
}

// A resource that is not a RateLimitConfig is refused, not misread.
func TestDecodeRefusesOtherTypes(t *testing.T) {
	other, err := anypb.New(&rlspb.RateLimitRequest{Domain: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := xds.Decode(&discoveryv3.DiscoveryResponse{Resources: []*anypb.Any{other}}, envoyrls.LoadOptions{}); err == nil {
		t.Fatal("a RateLimitRequest was read as a configuration")
	}
}

func TestStartOptions(t *testing.T) {
	eng, err := engine.New(memory.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	srv, _ := envoyrls.NewServer(nil, envoyrls.Options{Engine: eng})
	if _, err := xds.Start(srv, xds.Options{}); err == nil || !strings.Contains(err.Error(), "Options.Server") {
		t.Errorf("no server: %v", err)
	}
	if _, err := xds.Start(srv, xds.Options{Server: "x:1", Backoff: time.Minute, MaxBackoff: time.Second}); err == nil {
		t.Error("MaxBackoff under Backoff was accepted")
	}
}

// A push that drops limits names them in the log, as a file reload does.
func TestPushLogsDroppedLimits(t *testing.T) {
	var logs lockedLog
	two := perDay("api", "api", 3)
	two.Descriptors = append(two.Descriptors, &confv3.RateLimitDescriptor{Key: "path", Value: "/x",
		RateLimit: &confv3.RateLimitPolicy{Unit: confv3.RateLimitUnit_MINUTE, RequestsPerUnit: 10}})
	f := start(t, xds.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, two)
	if err := f.up.wait(t, "1"); err != nil {
		t.Fatal(err)
	}
	f.cp.Push("2", perDay("api", "api", 3))
	if err := f.up.wait(t, "2"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `version=2 domains=[api] dropped=[api.path_/x]`) {
		t.Errorf("the dropped limit is not logged:\n%s", logs.String())
	}
}

// lockedLog is a bytes.Buffer safe for a logger writing from the client's
// goroutine while the test reads.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
