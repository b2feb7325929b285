package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/sluice-go/sluice/backend/redis/redistest"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The tests below run `sluice rls` as a real process and drive it with
// go-control-plane's generated client over loopback gRPC. Limits whose
// budget a test exhausts are per day (and the test starts away from
// midnight) or, in the README's and the repository's examples, per minute
// or hour: there the test sees a window roll in duration_until_reset and
// runs the sequence again or excuses the step.

type rlsProcess struct {
	cmd         *exec.Cmd
	grpc, admin string
	exited      chan error
	stderr      *syncBuffer
	client      rlspb.RateLimitServiceClient
	conn        *grpc.ClientConn
}

var rlsListeningRE = regexp.MustCompile(`msg="sluice rls: listening" grpc=(\S+) admin=(\S*)`)

// startRLS starts `sluice rls` with args (plus --grpc and --admin on
// loopback ports of its choosing) and connects a client to it.
func startRLS(t *testing.T, args ...string) *rlsProcess {
	t.Helper()
	return startRLSEnv(t, nil, args...)
}

// startRLSEnv is startRLS with env added to the process's environment.
func startRLSEnv(t *testing.T, env []string, args ...string) *rlsProcess {
	t.Helper()
	bin := buildBinary(t)
	args = append([]string{"rls", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, args...)
	p := &rlsProcess{cmd: exec.Command(bin, args...), exited: make(chan error, 1), stderr: &syncBuffer{}}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.conn != nil {
			p.conn.Close()
		}
		p.cmd.Process.Kill()
		<-p.exited
		p.exited <- nil
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := rlsListeningRE.FindStringSubmatch(p.stderr.String()); m != nil {
			p.grpc, p.admin = m[1], strings.Trim(m[2], `"`)
			break
		}
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("rls exited (%v) before it listened:\n%s", err, p.stderr)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("rls did not listen within 20s:\n%s", p.stderr)
		}
	}
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.conn, p.client = conn, rlspb.NewRateLimitServiceClient(conn)
	return p
}

// goroutines ends the process with SIGQUIT and returns what it wrote,
// its goroutines' stacks last, for a failure's message.
func (p *rlsProcess) goroutines() string {
	if err := p.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		return fmt.Sprintf("(SIGQUIT: %v)", err)
	}
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(10 * time.Second):
		return "(no exit 10s after SIGQUIT)\n" + tail(p.stderr.String())
	}
	return lastBytes(p.stderr.String(), 64<<10)
}

// stop sends SIGTERM and waits for exit status 0.
func (p *rlsProcess) stop(t *testing.T) {
	t.Helper()
	p.conn.Close()
	p.conn = nil
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.exited <- err
		if err != nil {
			t.Fatalf("rls after SIGTERM: %v, want exit 0:\n%s", err, p.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("rls still running 20s after SIGTERM:\n%s", p.stderr)
	}
}

// rd builds a descriptor from key, value pairs.
func rd(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (p *rlsProcess) ask(t *testing.T, domain string, hits uint32, ds ...*rlv3.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := p.client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v\n%s", domain, err, p.stderr)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	return resp
}

// rlsAnswer renders a response as "OVERALL: status status ...".
func rlsAnswer(r *rlspb.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(r.OverallCode.String() + ":")
	for _, s := range r.Statuses {
		b.WriteString(" " + s.Code.String())
	}
	return b.String()
}

// limitOf renders a status's current limit as "10/SECOND", or "-".
func limitOf(s *rlspb.RateLimitResponse_DescriptorStatus) string {
	if s.CurrentLimit == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%s", s.CurrentLimit.RequestsPerUnit, s.CurrentLimit.Unit)
}

// inOneWindow runs seq until a run sees no window roll: seq returns the
// duration_until_reset of its first and last answers, and a later one
// longer than the first means a new window began during the run.
func inOneWindow(t *testing.T, seq func() (first, last time.Duration)) {
	t.Helper()
	for try := 0; try < 3; try++ {
		first, last := seq()
		if last <= first {
			return
		}
		t.Logf("the window rolled during run %d; running again", try)
	}
	t.Fatal("the window rolled during three runs")
}

// Every example configuration of envoyproxy/ratelimit's README, loaded
// unchanged, answers as the README says.
func TestRLSProcessReadmeExamples(t *testing.T) {
	t.Parallel()
	waitAwayFromDayBoundary(t) // their budgets are per day
	p := startRLS(t, "--config", "testdata/rls/readme")

	// Which limit applies is in each status's current_limit.
	limits := []struct {
		domain string
		desc   *rlv3.RateLimitDescriptor
		want   string
	}{
		{"mongo_cps", rd("database", "users"), "500/SECOND"},
		{"mongo_cps", rd("database", "default"), "500/SECOND"},
		{"mongo_cps", rd("database", "other"), "-"},
		{"messaging", rd("message_type", "marketing", "to_number", "2061111111"), "5/DAY"},
		{"messaging", rd("to_number", "2061111111"), "100/DAY"},
		{"edge_proxy_per_ip", rd("remote_address", "50.0.0.1"), "10/SECOND"},
		{"edge_proxy_per_ip", rd("remote_address", "50.0.0.5"), "0/SECOND"},
		{"example4", rd("key", "value", "subkey", "subvalue"), "-"},
		{"internal", rd("azure", "x"), "100/MINUTE"},
		{"example6", rd("service", "auth-service", "user", "user-a"), "10/SECOND"},
		{"example6", rd("service", "auth-service", "user", "user-b"), "20/SECOND"},
		{"example7", rd("key_1", "value_1", "user", "bkthomps"), "5/SECOND"},
		{"example7", rd("key_2", "value_2", "user", "bkthomps"), "10/SECOND"},
		{"example8", rd("key1", "unspecified_value"), "10/MINUTE"},
		{"example8", rd("key1", "value1"), "20/MINUTE"},
		{"example9", rd("key1", "value1"), "20/MINUTE"},
		{"example9", rd("key1", "valueXYZ"), "20/MINUTE"},
		{"example9", rd("key1", "other"), "-"},
		{"example10", rd("route", "api", "http_method", "GET", "subject_id", "123"), "60/MINUTE"},
		{"example10_wildcard", rd("user", "alice", "action", "readfile", "resource", "documents"), "100/MINUTE"},
		{"example10_wildcard", rd("user", "alice", "action", "write", "resource", "documents"), "-"},
		{"example11", rd("files_no_share", "files_no_share/z.pdf"), "10/HOUR"},
		{"example11_metrics", rd("route", "api/v1", "method", "GET"), "60/MINUTE"},
	}
	for _, l := range limits {
		if got := limitOf(p.ask(t, l.domain, 0, l.desc).Statuses[0]); got != l.want {
			t.Errorf("%s %v: current_limit %s, want %s", l.domain, l.desc.Entries, got, l.want)
		}
	}

	// Example 2: five marketing messages a day to a number; the sixth is
	// refused, and the refusal spends nothing of the 100 a day.
	marketing := rd("message_type", "marketing", "to_number", "2062222222")
	number := rd("to_number", "2062222222")
	for i := 1; i <= 5; i++ {
		if got := rlsAnswer(p.ask(t, "messaging", 0, marketing, number)); got != "OK: OK OK" {
			t.Fatalf("example 2, message %d: %s", i, got)
		}
	}
	for i := 0; i < 3; i++ {
		if got := rlsAnswer(p.ask(t, "messaging", 0, marketing, number)); got != "OVER_LIMIT: OVER_LIMIT OK" {
			t.Fatalf("example 2, refused message %d: %s", i, got)
		}
	}
	if got := p.ask(t, "messaging", 0, number).Statuses[0].LimitRemaining; got != 94 {
		t.Errorf("example 2: the number has %d left, want 94 (5 sent, the 3 refused spent nothing, this one 1)", got)
	}

	// Example 3: the blocked address is always over.
	if got := rlsAnswer(p.ask(t, "edge_proxy_per_ip", 0, rd("remote_address", "50.0.0.5"))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("example 3, the blocked address: %s", got)
	}

	// Example 5: unlimited is OK with LimitRemaining MaxUint32.
	for i := 0; i < 50; i++ {
		r := p.ask(t, "internal", 0, rd("ldap", "cn=x"))
		if rlsAnswer(r) != "OK: OK" || r.Statuses[0].LimitRemaining != 1<<32-1 {
			t.Fatalf("example 5, ldap %d: %s remaining %d", i, rlsAnswer(r), r.Statuses[0].LimitRemaining)
		}
	}

	// Example 6: user-a's shadow limit never refuses.
	for i := 0; i < 30; i++ {
		if got := rlsAnswer(p.ask(t, "example6", 0, rd("service", "auth-service", "user", "user-a"))); got != "OK: OK" {
			t.Fatalf("example 6, user-a %d: %s", i, got)
		}
	}

	// Example 7: both descriptors: the replaced limit is dropped.
	r := p.ask(t, "example7", 0, rd("key_1", "value_1", "user", "bkthomps"), rd("key_2", "value_2", "user", "bkthomps"))
	if limitOf(r.Statuses[0]) != "-" || limitOf(r.Statuses[1]) != "10/SECOND" {
		t.Errorf("example 7: limits %s %s, want - 10/SECOND", limitOf(r.Statuses[0]), limitOf(r.Statuses[1]))
	}

	// Example 11: files/* shares one budget of 10 an hour; files_no_share/*
	// has one per value.
	var first, last time.Duration
	for i := 0; i < 5; i++ {
		for _, f := range []string{"files/a.pdf", "files/b.csv"} {
			r := p.ask(t, "example11", 0, rd("files", f))
			if rlsAnswer(r) != "OK: OK" {
				t.Fatalf("example 11, %s #%d: %s", f, i, rlsAnswer(r))
			}
			if first == 0 {
				first = r.Statuses[0].DurationUntilReset.AsDuration()
			}
		}
	}
	r = p.ask(t, "example11", 0, rd("files", "files/c.txt"))
	last = r.Statuses[0].DurationUntilReset.AsDuration()
	if last <= first && rlsAnswer(r) != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("example 11: files/c.txt after 10 shared hits: %s, want OVER_LIMIT", rlsAnswer(r))
	}
	for i := 0; i < 10; i++ {
		p.ask(t, "example11", 0, rd("files_no_share", "files_no_share/a.pdf"))
	}
	if got := rlsAnswer(p.ask(t, "example11", 0, rd("files_no_share", "files_no_share/b.csv"))); got != "OK: OK" {
		t.Errorf("example 11: files_no_share/b.csv after a.pdf's 10: %s, want OK", got)
	}

	// The README's other configurations of repeated domains.
	p2 := startRLS(t, "--config", "testdata/rls/readme-2")
	if got := limitOf(p2.ask(t, "example4", 0, rd("key", "value", "subkey", "subvalue")).Statuses[0]); got != "300/SECOND" {
		t.Errorf("example 4's second configuration: %s, want 300/SECOND", got)
	}
}

// The repository's example configuration (examples/ratelimit/config):
// nested limits, replaces, a zero limit, shadow_mode and unlimited, all
// per minute or second; each run takes fresh
// values, and one that sees its minute roll is run again.
func TestRLSProcessRepositoryExample(t *testing.T) {
	t.Parallel()
	p := startRLS(t, "--config", "testdata/rls/examples/example.yaml")
	run := 0
	inOneWindow(t, func() (first, last time.Duration) {
		run++
		v := fmt.Sprintf("run-%d", run)
		reset := func(r *rlspb.RateLimitResponse) time.Duration {
			for _, s := range r.Statuses {
				if s.CurrentLimit != nil && s.CurrentLimit.Unit == rlspb.RateLimitResponse_RateLimit_MINUTE {
					return s.DurationUntilReset.AsDuration()
				}
			}
			return 0
		}
		steps := []struct {
			ds   []*rlv3.RateLimitDescriptor
			want string
		}{
			// foo/bar bkthomps allows 1 a minute.
			{[]*rlv3.RateLimitDescriptor{rd("foo", v, "bar", "bkthomps")}, "OK: OK"},
			{[]*rlv3.RateLimitDescriptor{rd("foo", v, "bar", "bkthomps")}, "OVER_LIMIT: OVER_LIMIT"},
			// foo alone: 2 a minute.
			{[]*rlv3.RateLimitDescriptor{rd("foo", v)}, "OK: OK"},
			{[]*rlv3.RateLimitDescriptor{rd("foo", v)}, "OK: OK"},
			{[]*rlv3.RateLimitDescriptor{rd("foo", v)}, "OVER_LIMIT: OVER_LIMIT"},
			// banned: 0 a minute.
			{[]*rlv3.RateLimitDescriptor{rd("foo", v, "bar", "banned")}, "OVER_LIMIT: OVER_LIMIT"},
			// override replaces banned_limit: the banned descriptor is dropped.
			{[]*rlv3.RateLimitDescriptor{rd("foo", v, "bar", "banned"), rd("source_cluster", "proxy", "destination_cluster", "override")}, "OK: OK OK"},
			// shady is shadow_mode, 3 a minute: never refused.
			{[]*rlv3.RateLimitDescriptor{rd("foo", v, "baz", "shady")}, "OK: OK"},
			{[]*rlv3.RateLimitDescriptor{rd("foo", v, "baz", "shady")}, "OK: OK"},
			{[]*rlv3.RateLimitDescriptor{rd("foo", v, "baz", "shady")}, "OK: OK"},
			{[]*rlv3.RateLimitDescriptor{rd("foo", v, "baz", "shady")}, "OK: OK"},
			// bay is unlimited.
			{[]*rlv3.RateLimitDescriptor{rd("foo", v, "bay", "x")}, "OK: OK"},
			// unspec: 2 a minute per value (detailed_metric).
			{[]*rlv3.RateLimitDescriptor{rd("unspec", v)}, "OK: OK"},
			{[]*rlv3.RateLimitDescriptor{rd("unspec", v)}, "OK: OK"},
			{[]*rlv3.RateLimitDescriptor{rd("unspec", v)}, "OVER_LIMIT: OVER_LIMIT"},
		}
		for i, s := range steps {
			r := p.ask(t, "rl", 0, s.ds...)
			if i == 0 {
				first = reset(r)
			}
			last = max(last, reset(r))
			if got := rlsAnswer(r); got != s.want && last <= first {
				t.Errorf("run %d step %d %v: %s, want %s", run, i, s.ds, got, s.want)
			}
		}
		return first, last
	})
	// quota_mode limits of 1 and 2 a minute (the pinned example has
	// none; these are written here): never refused, each status OK, as
	// envoyproxy/ratelimit's service tests expect (TestServiceQuotaModeOnly:
	// quota mode only, OK). This runs once, and only a rolled minute
	// excuses it.
	cfg := filepath.Join(t.TempDir(), "quota.yaml")
	writeFile(t, cfg, `domain: rl
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
`)
	q := startRLS(t, "--config", cfg)
	want := []string{"OK: OK OK", "OK: OK OK", "OK: OK OK"}
	var first time.Duration
	for i, w := range want {
		r := q.ask(t, "rl", 0, rd("service", "service_1"), rd("service", "service_2"))
		d := r.Statuses[0].DurationUntilReset.AsDuration()
		if i == 0 {
			first = d
		}
		if got := rlsAnswer(r); got != w && d <= first {
			t.Errorf("quota_mode request %d: %s, want %s", i, got, w)
		}
	}
}

// Sluice's own configuration: all-or-nothing across nested and plain
// descriptors, shadow_mode, hits_addend (the request's and the
// descriptor's), a token bucket with a burst, unlimited, the headers, the
// metrics, and the health service.
func TestRLSProcessSluiceConfig(t *testing.T) {
	t.Parallel()
	waitAwayFromDayBoundary(t) // their budgets are per day
	p := startRLS(t, "--config", "testdata/rls/sluice")
	user := func(u string) *rlv3.RateLimitDescriptor { return rd("tenant", "acme", "user", u) }
	tenant := rd("tenant", "acme")

	// alice spends her 5; each of her requests also spends the tenant's 8.
	for i := 0; i < 5; i++ {
		if got := rlsAnswer(p.ask(t, "api", 0, user("alice"), tenant)); got != "OK: OK OK" {
			t.Fatalf("alice %d: %s", i, got)
		}
	}
	r := p.ask(t, "api", 0, user("alice"), tenant)
	if got := rlsAnswer(r); got != "OVER_LIMIT: OVER_LIMIT OK" {
		t.Fatalf("alice's 6th: %s", got)
	}
	hdr := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		hdr[h.Key] = h.Value
	}
	if !strings.HasPrefix(hdr["RateLimit"], `"per-user";r=0;t=`) || hdr["RateLimit-Policy"] != `"per-user";q=5;w=86400` || hdr["X-RateLimit-Limit"] != "5" || hdr["Retry-After"] == "" {
		t.Errorf("the refusal's headers: %v", hdr)
	}
	// bob with a request-level hits_addend of 3: the tenant has 3 left
	// (alice's refused 6th spent nothing), so it passes exactly.
	r = p.ask(t, "api", 3, user("bob"), tenant)
	if got := rlsAnswer(r); got != "OK: OK OK" || r.Statuses[1].LimitRemaining != 0 || r.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("bob's 3 hits: %s, remaining %d and %d, want 2 and 0", got, r.Statuses[0].LimitRemaining, r.Statuses[1].LimitRemaining)
	}
	// Now the tenant is spent: carol's request is refused whole, and her
	// own budget is untouched.
	if got := rlsAnswer(p.ask(t, "api", 0, user("carol"), tenant)); got != "OVER_LIMIT: OK OVER_LIMIT" {
		t.Fatalf("carol with the tenant spent: %s", got)
	}
	if got := p.ask(t, "api", 0, user("carol")).Statuses[0].LimitRemaining; got != 4 {
		t.Errorf("carol alone: %d left, want 4 (the refusal spent nothing)", got)
	}

	// shadow_mode: the trial plan's 2 a day never refuse, and count.
	for i := 0; i < 5; i++ {
		r := p.ask(t, "api", 0, rd("plan", "trial"))
		if rlsAnswer(r) != "OK: OK" || len(r.ResponseHeadersToAdd) != 0 {
			t.Fatalf("trial %d: %s, headers %v", i, rlsAnswer(r), r.ResponseHeadersToAdd)
		}
	}
	// A descriptor's own hits_addend, and a token bucket's burst of 10
	// (refilled at one an hour).
	up := rd("uploads", "u1")
	up.HitsAddend = wrapperspb.UInt64(7)
	if r := p.ask(t, "api", 0, up); rlsAnswer(r) != "OK: OK" || r.Statuses[0].LimitRemaining != 3 {
		t.Fatalf("7 uploads: %s remaining %d, want OK 3", rlsAnswer(r), r.Statuses[0].LimitRemaining)
	}
	if r := p.ask(t, "api", 4, rd("uploads", "u1")); rlsAnswer(r) != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("4 more uploads with 3 in the bucket: %s", rlsAnswer(r))
	}
	// Unlimited, and a descriptor matching nothing.
	if got := rlsAnswer(p.ask(t, "api", 0, rd("health", "x"), rd("nothing", "here"))); got != "OK: OK OK" {
		t.Errorf("unlimited and unmatched: %s", got)
	}

	for series, want := range map[string]float64{
		`sluice_rls_hits_total{descriptor="tenant.user",domain="api"}`:       11, // alice 6, bob 3, carol 2
		`sluice_rls_over_limit_total{descriptor="tenant.user",domain="api"}`: 1,
		`sluice_rls_shadow_mode_total{descriptor="plan_trial",domain="api"}`: 3,
		`sluice_rls_over_limit_total{descriptor="tenant",domain="api"}`:      1,
		`sluice_rls_requests_total{code="over_limit",domain="api"}`:          3,
	} {
		if got := metricValue(t, p.admin, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if code, body := get(t, "http://"+p.admin+"/healthz"); code != 200 || body != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	hc := healthpb.NewHealthClient(p.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: rlspb.RateLimitService_ServiceDesc.ServiceName})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("grpc health: %v %v", h, err)
	}
	// Server reflection lists the service, as grpcurl would ask.
	rc, err := reflectionpb.NewServerReflectionClient(p.conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	lr, err := rc.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var services []string
	for _, s := range lr.GetListServicesResponse().GetService() {
		services = append(services, s.GetName())
	}
	if !slices.Contains(services, rlspb.RateLimitService_ServiceDesc.ServiceName) {
		t.Errorf("reflection lists %v, without the rate-limit service", services)
	}
	rc.CloseSend()
	p.stop(t)
}

// Budgets survive a restart on Pebble: SIGTERM flushes, and the next
// process on the same directory refuses what was spent.
func TestRLSProcessPebbleRestart(t *testing.T) {
	t.Parallel()
	waitAwayFromDayBoundary(t) // their budgets are per day
	state := filepath.Join(t.TempDir(), "state")
	args := []string{"--config", "testdata/rls/sluice", "--backend", "pebble", "--dir", state}
	p := startRLS(t, args...)
	for i := 0; i < 5; i++ {
		if got := rlsAnswer(p.ask(t, "api", 0, rd("tenant", "t1", "user", "dave"))); got != "OK: OK" {
			t.Fatalf("dave %d: %s", i, got)
		}
	}
	p.stop(t)
	p = startRLS(t, args...)
	if got := rlsAnswer(p.ask(t, "api", 0, rd("tenant", "t1", "user", "dave"))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("dave after a restart: %s, want OVER_LIMIT (his 5 a day are spent)", got)
	}
	if got := rlsAnswer(p.ask(t, "api", 0, rd("tenant", "t1", "user", "erin"))); got != "OK: OK" {
		t.Errorf("erin after a restart: %s", got)
	}
	p.stop(t)
}

// waitLog waits until the process's log holds n lines containing s.
func (p *rlsProcess) waitLog(t *testing.T, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(p.stderr.String(), s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("no %d lines %q within 20s:\n%s", n, s, p.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A changed file is reloaded: a valid one is put in force keeping the
// budgets spent; an invalid one is rejected with its file, line and field,
// and the configuration in force stays.
func TestRLSProcessReload(t *testing.T) {
	t.Parallel()
	waitAwayFromDayBoundary(t) // their budgets are per day
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yaml")
	write := func(body string) {
		t.Helper()
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil { // as editors and ConfigMaps do
			t.Fatal(err)
		}
	}
	conf := func(n int) string {
		return fmt.Sprintf("domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: day\n      requests_per_unit: %d\n", n)
	}
	write(conf(3))
	p := startRLS(t, "--config", dir)
	for i := 0; i < 3; i++ {
		p.ask(t, "api", 0, rd("user", "frank"))
	}
	if got := rlsAnswer(p.ask(t, "api", 0, rd("user", "frank"))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Fatalf("frank's 4th of 3: %s", got)
	}
	write(conf(5))
	p.waitLog(t, "configuration reloaded", 1)
	for i, want := range []string{"OK: OK", "OK: OK", "OVER_LIMIT: OVER_LIMIT"} {
		if got := rlsAnswer(p.ask(t, "api", 0, rd("user", "frank"))); got != want {
			t.Errorf("after the limit went to 5, frank's request %d: %s, want %s (3 spent kept)", i, got, want)
		}
	}
	write("domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 100\n")
	p.waitLog(t, "configuration rejected", 1)
	if !strings.Contains(p.stderr.String(), `api.yaml:5: descriptors[0].rate_limit.unit: invalid rate limit unit \"fortnight\"`) {
		t.Errorf("the rejection does not name file, line and field:\n%s", p.stderr)
	}
	if got := rlsAnswer(p.ask(t, "api", 0, rd("user", "frank"))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("after a rejected file: %s, want the limit of 5 still in force", got)
	}
	// The file fixed back to what is in force: nothing changes, and the
	// log says the file is the configuration in force again.
	write(conf(5))
	p.waitLog(t, "the configuration loads again, and is the one in force", 1)
	// SIGHUP reloads too.
	write(conf(7))
	p.waitLog(t, "configuration reloaded", 2)
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "configuration reloaded", 3)
	if got := rlsAnswer(p.ask(t, "api", 0, rd("user", "frank"))); got != "OK: OK" {
		t.Errorf("after the limit went to 7: %s", got)
	}
	if got := metricValue(t, p.admin, `sluice_config_reloads_total{result="error"}`); got < 1 {
		t.Errorf("reload errors counted: %v", got)
	}
}

// Usage errors and an invalid configuration exit 2 with a clear message.
func TestRLSUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: \"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noStore, noRedisStore, pebbleStore := filepath.Join(dir, "nostore.yaml"), filepath.Join(dir, "noaddr.yaml"), filepath.Join(dir, "pebble.yaml")
	writeFile(t, noStore, "on_store_error: closed\n")
	writeFile(t, noRedisStore, "store:\n  backend: redis\n  redis:\n    timeout: 20ms\n")
	writeFile(t, pebbleStore, "store:\n  backend: pebble\n  dir: "+filepath.Join(dir, "state")+"\n")
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"rls", "--help"}, 0, ""},
		{[]string{"rls", "--grpc", ":0"}, 2, "--config (or --xds) is required"},
		{[]string{"rls", "--config", "testdata/rls/sluice"}, 2, "--grpc is required"},
		{[]string{"rls", "--config", bad, "--grpc", "127.0.0.1:0"}, 2, "bad.yaml:3: descriptors[0].key: required"},
		{[]string{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--headers", "all"}, 2, "--headers: want both"},
		{[]string{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--backend", "pebble"}, 2, "--dir: required"},
		{[]string{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--backend", "redis", "--redis-addr", "127.0.0.1:1", "--redis-timeout", "0s"}, 2, "flag -redis-timeout: want a positive duration"},
		{[]string{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--backend", "redis", "--redis-addr", "127.0.0.1:1", "--redis-breaker", "window=1ms"}, 2, "window: must be at least 10ms"},
		{[]string{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--backend", "redis", "--redis-addr", "127.0.0.1:1", "--redis-breaker", "failure_rate=2"}, 2, "failure_rate: want a share above 0 and at most 1"},
		{[]string{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--redis-breaker", "off"}, 2, "--redis-breaker: only with --backend redis (the store is memory)"},
		{[]string{"rls", "--config", "testdata/rls/sluice", "--grpc", "8081"}, 2, "--grpc 8081: want host:port"},
		{[]string{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--max-descriptors", "0"}, 2, "--max-descriptors 0: want at least 1"},
		{[]string{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--admin-host", "ops.example"}, 2, "--admin-host: only with --admin"},
		{[]string{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--max-entries", "-1"}, 2, "--max-entries -1: want at least 1"},
		{[]string{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--max-value-bytes", "0"}, 2, "--max-value-bytes 0: want at least 1"},
		{[]string{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--max-value-bytes", "1k"}, 2, "invalid value \"1k\" for flag -max-value-bytes"},
		{[]string{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--store", noStore}, 2, "nostore.yaml:1: store: the file has no store section"},
		{[]string{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--store", noRedisStore}, 2, "store.redis.addrs: required for the redis backend"},
		{[]string{"rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0", "--store", pebbleStore, "--redis-timeout", "1s"}, 2, "--redis-timeout: only with --backend redis (the store is pebble, from " + pebbleStore + "'s store section)"},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCmd(t, "", tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, tt.code, tt.want)
		}
		if tt.code == 0 && !strings.Contains(stdout, "Usage: sluice rls") {
			t.Errorf("%v: stdout %q", tt.args, stdout)
		}
		if tt.code == 0 {
			for _, want := range []string{"--headers both|ietf|x-ratelimit|envoy|none", "--max-descriptors N --max-entries N --max-value-bytes N"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("%v: the synopsis does not list %q", tt.args, want)
				}
			}
		}
	}
}

// Two rls processes on one Redis spend one budget: dave's 5 a day are 5 in
// all, whichever process answers.
func TestRLSProcessRedisSharesTheBudget(t *testing.T) {
	t.Parallel()
	s := redisServer(t)
	waitAwayFromDayBoundary(t)
	// A Redis deadline the start meets beside busy loops: the default
	// 50ms failed a process's first subscription so. The test is about
	// the shared budget.
	args := []string{"--config", "testdata/rls/sluice", "--backend", "redis", "--redis-addr", s.Addr, "--redis-prefix", testPrefix(t), "--redis-timeout", "2s"}
	a, b := startRLS(t, args...), startRLS(t, args...)
	var got []string
	for i := 0; i < 6; i++ {
		p := a
		if i%2 == 1 {
			p = b
		}
		got = append(got, rlsAnswer(p.ask(t, "api", 0, rd("tenant", "t1", "user", "dave"))))
	}
	if want := "OK: OK,OK: OK,OK: OK,OK: OK,OK: OK,OVER_LIMIT: OVER_LIMIT"; strings.Join(got, ",") != want {
		t.Errorf("dave across two processes: %v, want five allowed in all", got)
	}
}

// rlsAdminConfig is one domain with a limit of 2 a day per to_number of
// marketing messages.
const rlsAdminConfig = `domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 2
`

// On loopback without a token: GET /v1/keys shows a blocked descriptor's
// budget, POST /v1/reset (form or JSON) unblocks it and only it, and the
// reset is logged with who asked.
func TestRLSProcessAdminResetAndKeys(t *testing.T) {
	t.Parallel()
	waitAwayFromDayBoundary(t)
	cfg := filepath.Join(t.TempDir(), "messaging.yaml")
	writeFile(t, cfg, rlsAdminConfig)
	p := startRLS(t, "--config", cfg)
	admin := "http://" + p.admin
	spend := func(number string) string {
		return rlsAnswer(p.ask(t, "messaging", 0, rd("message_type", "marketing", "to_number", number)))
	}
	for i, want := range []string{"OK: OK", "OK: OK", "OVER_LIMIT: OVER_LIMIT"} {
		if got := spend("2061111111"); got != want {
			t.Fatalf("call %d: %s, want %s", i+1, got, want)
		}
		spend("2062222222")
	}
	const q = "domain=messaging&entry=message_type=marketing&entry=to_number=2061111111"
	code, body := adminDo(t, testClient, "GET", admin+"/v1/keys?"+q, "", "", "")
	if code != 200 {
		t.Fatalf("GET /v1/keys: %d %s", code, body)
	}
	var st rlsKeyStateJSON
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if st.Domain != "messaging" || st.Rule != "messaging.message_type_marketing.to_number" || st.Limit != 2 ||
		st.Remaining != 0 || st.AllowedNow || st.Record == nil || st.RetryAfterSeconds <= 0 {
		t.Errorf("GET /v1/keys of the blocked number: %+v\nwant limit messaging.message_type_marketing.to_number, 2, nothing left, a record", st)
	}

	form := "application/x-www-form-urlencoded"
	if code, body := adminDo(t, testClient, "POST", admin+"/v1/reset", "", form, q); code != 200 || !strings.Contains(body, `"reset": true`) {
		t.Fatalf("POST /v1/reset (form): %d %s", code, body)
	}
	if got := spend("2061111111"); got != "OK: OK" {
		t.Errorf("the reset number: %s, want OK again", got)
	}
	if got := spend("2062222222"); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("another number: %s, want still OVER_LIMIT: a reset is one descriptor's", got)
	}
	jsonBody := `{"domain":"messaging","descriptor":[{"key":"message_type","value":"marketing"},{"key":"to_number","value":"2062222222"}]}`
	if code, body := adminDo(t, testClient, "POST", admin+"/v1/reset", "", "application/json", jsonBody); code != 200 {
		t.Fatalf("POST /v1/reset (JSON): %d %s", code, body)
	}
	if got := spend("2062222222"); got != "OK: OK" {
		t.Errorf("the number reset by JSON: %s, want OK", got)
	}
	p.waitLog(t, `msg="sluice rls: admin reset"`, 2)
	if !strings.Contains(p.stderr.String(), "remote=127.0.0.1:") {
		t.Errorf("the reset log does not name the remote address:\n%s", p.stderr)
	}

	for _, c := range []struct {
		method, query string
		want          int
	}{
		{"GET", "domain=billing&entry=message_type=marketing&entry=to_number=1", 404},
		{"GET", "domain=messaging&entry=message_type=transactional&entry=to_number=1", 404},
		{"GET", "domain=messaging", 400},
		{"GET", "entry=message_type=marketing", 400},
		{"POST", "domain=messaging&entry=message_type=marketing", 404}, // shorter than the limit's depth
		{"PUT", "", 405},
	} {
		url, body, ctype := admin+"/v1/keys?"+c.query, "", ""
		if c.method != "GET" {
			url, body, ctype = admin+"/v1/reset", c.query, form
		}
		if code, out := adminDo(t, testClient, c.method, url, "", ctype, body); code != c.want || !strings.Contains(out, `"error"`) {
			t.Errorf("%s %s: %d %s, want %d with an error", c.method, c.query, code, out, c.want)
		}
	}
}

// Off loopback the rls admin listener needs a token, as serve's does: no
// start without one; with one, 401 without it, from another address.
func TestRLSAdminToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "messaging.yaml")
	writeFile(t, cfg, rlsAdminConfig)
	var stderr strings.Builder
	if code := runRLS(context.Background(), []string{"--config", cfg, "--grpc", "127.0.0.1:0", "--admin", "0.0.0.0:0"}, io.Discard, &stderr, nil); code != 2 ||
		!strings.Contains(stderr.String(), "not loopback") || !strings.Contains(stderr.String(), "--admin-token-file") {
		t.Errorf("--admin 0.0.0.0:0 without a token: exit %d\n%s\nwant 2 naming --admin-token-file", code, stderr.String())
	}
	stderr.Reset()
	if code := runRLS(context.Background(), []string{"--config", cfg, "--grpc", "127.0.0.1:0", "--admin-token-file", cfg}, io.Discard, &stderr, nil); code != 2 || !strings.Contains(stderr.String(), "only with --admin") {
		t.Errorf("--admin-token-file without --admin: exit %d\n%s\nwant 2", code, stderr.String())
	}

	const token = "0123456789abcdef0123456789abcdef"
	tokenPath := filepath.Join(dir, "token")
	writeFile(t, tokenPath, token+"\n")
	bind, client := "0.0.0.0:0", &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext}}
	own := ownAddress()
	if own != "" {
		bind, client = net.JoinHostPort(own, "0"), testClient
	}
	p := startRLS(t, "--config", cfg, "--admin", bind, "--admin-token-file", tokenPath)
	_, port, _ := net.SplitHostPort(p.admin)
	host := own
	if host == "" {
		host = "127.0.0.1"
	}
	admin := "http://" + net.JoinHostPort(host, port)
	q := url.Values{"domain": {"messaging"}, "entry": {"message_type=marketing", "to_number=1"}}.Encode()
	form := "application/x-www-form-urlencoded"
	for _, tok := range []string{"", "wrong-token-0123456789abcdef", token + "x"} {
		for _, c := range []struct{ method, path, ctype, body string }{
			{"POST", "/v1/reset", form, q},
			{"GET", "/v1/keys?" + q, "", ""},
			{"GET", "/metrics", "", ""},
			{"GET", "/config", "", ""},
		} {
			if code, body := adminDo(t, client, c.method, admin+c.path, tok, c.ctype, c.body); code != 401 || body != "unauthorized\n" {
				t.Errorf("%s %s with token %q: %d %q, want 401 and no detail", c.method, c.path, tok, code, body)
			}
		}
	}
	if code, body := adminDo(t, client, "GET", admin+"/healthz", "", "", ""); code != 200 || body != "ok" {
		t.Errorf("/healthz without a token: %d %q, want it open", code, body)
	}
	// Let in, and told there was nothing to reset: the descriptor has
	// spent nothing.
	if code, body := adminDo(t, client, "POST", admin+"/v1/reset", token, form, q); code != 404 || !strings.Contains(body, `"reset": false`) {
		t.Errorf("POST /v1/reset with the token, of a descriptor with no record: %d %s, want 404 and reset false", code, body)
	}
	if code, body := adminDo(t, client, "GET", admin+"/v1/keys?"+q, token, "", ""); code != 200 || !strings.Contains(body, `"allowed_now": true`) {
		t.Errorf("GET /v1/keys with the token: %d %s", code, body)
	}
	p.waitLog(t, "token=true", 1)
}

// rlsLoadConfig: a hot descriptor, a tenant with a per-user limit under
// it (two limits per request), and one for distinct callers.
const rlsLoadConfig = `domain: load
descriptors:
  - key: hot
    rate_limit:
      unit: day
      requests_per_unit: 100
  - key: tenant
    rate_limit:
      unit: day
      requests_per_unit: 100000
    descriptors:
      - key: user
        rate_limit:
          unit: day
          requests_per_unit: 100
  - key: solo
    rate_limit:
      unit: day
      requests_per_unit: 5
`

// `sluice rls` on Redis with the store's defaults, 64 concurrent callers:
// 1,000 calls on one fresh descriptor, then 1,000 on a request of two
// limits, admit exactly 100 each with not one error; once spent, the hot
// descriptor costs Redis at most one script per five decisions, and
// distinct callers at most one per decision.
func TestRLSProcessRedisUnderLoad(t *testing.T) {
	rs := redistest.Start(t)
	waitAwayFromDayBoundary(t)
	cfg := filepath.Join(t.TempDir(), "load.yaml")
	writeFile(t, cfg, rlsLoadConfig)
	// A Redis call's deadline the 64 callers meet on a loaded machine:
	// beside busy loops, calls queued for the pool's connections passed
	// the default 50ms and were answered UNAVAILABLE. The test is about
	// the answers' counts, not the deadline.
	p := startRLS(t, "--config", cfg, "--backend", "redis", "--redis-addr", rs.Addr, "--redis-timeout", "2s")
	run := func(n int, req func(i int) []*rlv3.RateLimitDescriptor) (ok, over int, errs []error) {
		var (
			mu   sync.Mutex
			wg   sync.WaitGroup
			jobs = make(chan int, n)
		)
		for i := range n {
			jobs <- i
		}
		close(jobs)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range jobs {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					resp, err := p.client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "load", Descriptors: req(i)})
					cancel()
					mu.Lock()
					switch {
					case err != nil:
						errs = append(errs, err)
					case resp.OverallCode == rlspb.RateLimitResponse_OK:
						ok++
					case resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT:
						over++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return ok, over, errs
	}
	hot := func(int) []*rlv3.RateLimitDescriptor { return []*rlv3.RateLimitDescriptor{rd("hot", "h")} }
	two := func(int) []*rlv3.RateLimitDescriptor {
		return []*rlv3.RateLimitDescriptor{rd("tenant", "t"), rd("tenant", "t", "user", "u")}
	}
	for _, c := range []struct {
		name string
		req  func(int) []*rlv3.RateLimitDescriptor
	}{{"one descriptor", hot}, {"two limits", two}} {
		ok, over, errs := run(1000, c.req)
		if len(errs) > 0 {
			t.Fatalf("%s: %d errors, the first: %v", c.name, len(errs), errs[0])
		}
		if ok != 100 || over != 900 {
			t.Errorf("%s: 1,000 calls from 64 callers: %d OK and %d OVER_LIMIT, want exactly 100 and 900", c.name, ok, over)
		}
	}
	scripts := func() int64 { c := rs.CommandCalls(t); return c["evalsha"] + c["eval"] }
	before := scripts()
	if ok, _, errs := run(1000, hot); ok != 0 || len(errs) > 0 {
		t.Fatalf("the spent hot descriptor: %d OK, %v", ok, errs)
	}
	if n := scripts() - before; n > 200 {
		t.Errorf("1,000 calls on the spent hot descriptor ran %d scripts, want at most 200", n)
	}
	before = scripts()
	solo := func(i int) []*rlv3.RateLimitDescriptor {
		return []*rlv3.RateLimitDescriptor{rd("solo", "caller-"+strconv.Itoa(i))}
	}
	if ok, _, errs := run(1000, solo); ok != 1000 || len(errs) > 0 {
		t.Fatalf("1,000 distinct callers: %d OK, %v", ok, errs)
	}
	if n := scripts() - before; n > 1000 {
		t.Errorf("1,000 distinct callers ran %d scripts, want at most one each", n)
	}
}

// rls takes its Redis store from --store's file, deadline and breaker
// included, and /metrics shows the breaker: with the file's breaker, a
// stopped Redis opens it and calls are refused at once; with
// --redis-breaker off over the same file every call goes to Redis.
func TestRLSProcessRedisStoreFile(t *testing.T) {
	t.Parallel()
	s := redisServer(t)
	waitAwayFromDayBoundary(t)
	store := filepath.Join(t.TempDir(), "store.yaml")
	writeFile(t, store, fmt.Sprintf(`# the store section of a gateway configuration
store:
  backend: redis
  redis:
    addrs: [%s]
    key_prefix: %q
    timeout: 20ms
    breaker:
      window: 10s
      min_calls: 5
      failure_rate: 0.5
`, s.Addr, testPrefix(t)))
	on := startRLS(t, "--config", "testdata/rls/sluice", "--store", store)
	off := startRLS(t, "--config", "testdata/rls/sluice", "--store", store, "--redis-breaker", "off")
	for _, p := range []*rlsProcess{on, off} {
		// The file's 20ms deadline keeps the stopped-Redis calls below
		// short; on a machine busy with other builds a healthy call can
		// miss it too (the process' first, which dials and loads the
		// script, most of all). Up to three tries: fewer than the
		// breaker's five calls, so it cannot open.
		for try := 1; ; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			resp, err := p.client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{rd("tenant", "t1", "user", "erin")}})
			cancel()
			if status.Code(err) == grpccodes.Unavailable && try < 3 {
				t.Logf("erin's call, try %d, on a healthy Redis with a 20ms deadline: %v", try, err)
				continue
			}
			if err != nil {
				t.Fatalf("erin's first call: %v\n%s", err, p.stderr)
			}
			if got := rlsAnswer(resp); got != "OK: OK" {
				t.Fatalf("erin's first call: %s", got)
			}
			break
		}
		if calls := metricValue(t, p.admin, "sluice_store_calls_total"); calls < 1 {
			t.Errorf("sluice_store_calls_total after a decision on Redis: %v", calls)
		}
	}
	if !strings.Contains(on.stderr.String(), "key_prefix="+testPrefix(t)) {
		t.Errorf("the file's key_prefix is not the one in force:\n%s", on.stderr)
	}

	s.Pause()
	defer s.Resume()
	unavailable := func(p *rlsProcess, user string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := p.client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{rd("tenant", "t1", "user", user)}})
		if status.Code(err) != grpccodes.Unavailable {
			t.Errorf("%s's call with Redis stopped: %v, want UNAVAILABLE", user, err)
		}
	}
	// Calls one after another: each is the one probe the open breaker
	// lets through, so they open it but none is refused at once.
	const n = 20
	for _, p := range []*rlsProcess{on, off} {
		for i := 0; i < n; i++ {
			unavailable(p, fmt.Sprint("u", i))
		}
	}
	if got := metricValue(t, on.admin, "sluice_store_breaker_opened_total"); got < 1 {
		t.Errorf("the file's breaker (5 calls, half failed) did not open after %d failed calls", n)
	}
	// Calls together: one probes, the others are refused at once.
	for round := 0; metricValue(t, on.admin, "sluice_store_breaker_rejected_total") == 0; round++ {
		if round == 50 {
			t.Fatalf("the open breaker refused none of 50 rounds of 8 calls together")
		}
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Go(func() { unavailable(on, fmt.Sprint("c", i)) })
		}
		wg.Wait()
	}
	if got := metricValue(t, on.admin, "sluice_store_breaker_open"); got != 1 {
		t.Errorf("sluice_store_breaker_open with Redis stopped: %v, want 1", got)
	}
	for _, series := range []string{"sluice_store_breaker_opened_total", "sluice_store_breaker_rejected_total", "sluice_store_breaker_open"} {
		if got := metricValue(t, off.admin, series); got != 0 {
			t.Errorf("with --redis-breaker off, %s = %v, want 0", series, got)
		}
	}
	if got := metricValue(t, off.admin, "sluice_store_call_failures_total"); got < n {
		t.Errorf("with --redis-breaker off, %v of %d calls to a stopped Redis failed", got, n)
	}
	// The log says when the breaker opened, and when Redis, back, closed it.
	if log := on.stderr.String(); strings.Count(log, "circuit breaker open") < 1 || strings.Contains(log, "circuit breaker closed") {
		t.Errorf("with Redis stopped, the log says the breaker opened %d times and closed: %v; want opened, not closed:\n%s",
			strings.Count(log, "circuit breaker open"), strings.Contains(log, "circuit breaker closed"), log)
	}
	s.Resume()
	for i := 0; !strings.Contains(on.stderr.String(), "circuit breaker closed"); i++ {
		if i == 100 {
			t.Fatalf("Redis back, 100 calls later the log does not say the breaker closed:\n%s", on.stderr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		on.client.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*rlv3.RateLimitDescriptor{rd("tenant", "t1", "user", fmt.Sprint("back", i))}})
		cancel()
	}
	if strings.Contains(off.stderr.String(), "circuit breaker") {
		t.Errorf("with --redis-breaker off, the log speaks of the breaker:\n%s", off.stderr)
	}
}

// A deployment's envoyproxy/ratelimit environment works unchanged: the
// configuration under RUNTIME_ROOT, SHADOW_MODE, and
// LIMIT_RESPONSE_HEADERS_ENABLED with its header names, which give the
// headers envoyproxy/ratelimit gives (its service's rateLimit*Header:
// requests_per_unit, limit_remaining, seconds to the window's reset).
func TestRLSProcessEnvoyEnvironment(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "env.yaml"), "domain: env\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")
	waitAwayFromDayBoundary(t)
	p := startRLSEnv(t, []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit",
		"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_REMAINING_HEADER=X-Left", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"})
	headers := func(r *rlspb.RateLimitResponse) map[string]string {
		m := map[string]string{}
		for _, h := range r.ResponseHeadersToAdd {
			m[h.Key] = h.Value
		}
		return m
	}
	r := p.ask(t, "env", 0, rd("user", "u"))
	h := headers(r)
	if rlsAnswer(r) != "OK: OK" || h["RateLimit-Limit"] != "2" || h["X-Left"] != "1" || len(h) != 3 {
		t.Fatalf("first: %s %v; want OK and envoyproxy/ratelimit's three headers", rlsAnswer(r), h)
	}
	if reset, err := strconv.Atoi(h["RateLimit-Reset"]); err != nil || reset < 1 || reset > 3600 {
		t.Errorf("RateLimit-Reset %q: want the seconds to the hour's end", h["RateLimit-Reset"])
	}
	p.ask(t, "env", 0, rd("user", "u"))
	r = p.ask(t, "env", 0, rd("user", "u"))
	if h = headers(r); rlsAnswer(r) != "OVER_LIMIT: OVER_LIMIT" || h["X-Left"] != "0" {
		t.Errorf("third of 2: %s %v", rlsAnswer(r), h)
	}

	// SHADOW_MODE: decided and counted, always OK; and
	// RESPONSE_DYNAMIC_METADATA: the request comes back as metadata.
	s := startRLSEnv(t, []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "SHADOW_MODE=true", "RESPONSE_DYNAMIC_METADATA=true"})
	if md := s.ask(t, "env", 0, rd("user", "w")).GetDynamicMetadata().AsMap(); md["domain"] != "env" || md["quotaModeEnabled"] != false {
		t.Errorf("RESPONSE_DYNAMIC_METADATA: %v", md)
	}
	for range 3 {
		if got := rlsAnswer(s.ask(t, "env", 0, rd("user", "v"))); got != "OK: OK" {
			t.Errorf("under SHADOW_MODE: %s, want OK", got)
		}
	}

	// MERGE_DOMAIN_CONFIG: a second file of the domain is merged, not
	// refused; reloads merge too.
	writeFile(t, filepath.Join(dir, "env-more.yaml"), "domain: env\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	m := startRLSEnv(t, []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "MERGE_DOMAIN_CONFIG=true"})
	if got := rlsAnswer(m.ask(t, "env", 0, rd("ip", "10.0.0.1"))); got != "OK: OK" {
		t.Errorf("the merged file's limit, first: %s", got)
	}
	if got := rlsAnswer(m.ask(t, "env", 0, rd("ip", "10.0.0.1"))); got != "OVER_LIMIT: OVER_LIMIT" {
		t.Errorf("the merged file's limit of 1, second: %s", got)
	}
	cmd := exec.Command(buildBinary(t), "rls", "--grpc", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), `duplicate domain \"env\"`) && !strings.Contains(string(out), `duplicate domain "env"`) {
		t.Errorf("two files of one domain without MERGE_DOMAIN_CONFIG: %v %s, want them refused", err, out)
	}
	os.Remove(filepath.Join(dir, "env-more.yaml"))

	// What Sluice cannot honour is refused, naming the setting.
	for _, c := range []struct{ env, want string }{
		{"CONFIG_TYPE=GRPC_XDS_DELTA", "CONFIG_TYPE=GRPC_XDS_DELTA: want FILE or GRPC_XDS_SOTW"},
		{"REDIS_PERSECOND=true", "REDIS_PERSECOND=true: not supported"},
		{"NEAR_LIMIT_RATIO=1.5", "NEAR_LIMIT_RATIO=1.5: want a share of the limit in (0, 1]"},
		{"BACKEND_TYPE=memcache", "BACKEND_TYPE=memcache"},
		{"GRPC_UDS=/tmp/ratelimit.sock", "GRPC_UDS=/tmp/ratelimit.sock: sluice rls listens on TCP only: --grpc HOST:PORT"},
		// Refused when REDIS_* are to give the store (no --backend, no --store).
		{"REDIS_TLS_CLIENT_CERT=/etc/redis/client.pem", "REDIS_TLS_CLIENT_CERT=/etc/redis/client.pem: sluice rls presents no client certificate to Redis"},
	} {
		cmd := exec.Command(buildBinary(t), "rls", "--grpc", "127.0.0.1:0")
		cmd.Env = append(os.Environ(), "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", c.env)
		if strings.HasPrefix(c.env, "REDIS_") {
			cmd.Env = append(cmd.Env, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=127.0.0.1:1")
		}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%s: %v %s, want exit 2 saying %q", c.env, err, out, c.want)
		}
	}
}

// envoyproxy/ratelimit's Redis environment gives the store when no flag
// does: two processes on REDIS_URL share one budget under
// CACHE_KEY_PREFIX; a unix socket is refused with what to set.
func TestRLSProcessRedisFromEnvironment(t *testing.T) {
	s := redisServer(t)
	waitAwayFromDayBoundary(t)
	prefix := testPrefix(t)
	env := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + s.Addr, "CACHE_KEY_PREFIX=" + prefix}
	a := startRLSEnv(t, env, "--config", "testdata/rls/sluice")
	b := startRLSEnv(t, env, "--config", "testdata/rls/sluice")
	var got []string
	for i := range 6 {
		p := a
		if i%2 == 1 {
			p = b
		}
		got = append(got, rlsAnswer(p.ask(t, "api", 0, rd("tenant", "t1", "user", "erin"))))
	}
	if want := "OK: OK,OK: OK,OK: OK,OK: OK,OK: OK,OVER_LIMIT: OVER_LIMIT"; strings.Join(got, ",") != want {
		t.Errorf("erin across two processes on REDIS_URL: %v, want five allowed in all", got)
	}
	if keys := redisKeys(t, s, prefix); len(keys) == 0 {
		t.Errorf("no key under CACHE_KEY_PREFIX %q", prefix)
	}
	cmd := exec.Command(buildBinary(t), "rls", "--config", "testdata/rls/sluice", "--grpc", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "REDIS_URL=/var/run/nutcracker/ratelimit.sock")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "REDIS_SOCKET_TYPE unset: sluice rls reaches Redis over TCP only") {
		t.Errorf("a unix socket: %v %s", err, out)
	}
}
