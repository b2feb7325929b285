package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/bench/internal/rlsproc"
)

// quotaYAML is the same hierarchy as envoyproxy/ratelimit's nested
// descriptors: the organisation's pool, and each user within it.
func quotaYAML(o options) string {
	return fmt.Sprintf(`domain: quota
descriptors:
  - key: org
    rate_limit:
      unit: day
      requests_per_unit: %d
    descriptors:
      - key: user
        rate_limit:
          unit: day
          requests_per_unit: %d
`, o.orgLimit, o.userLimit)
}

// probe is a call that tells a server is ready (an organisation of its
// own, never counted).
var probe = rlsproc.Probe{Domain: "quota", Key: "org", Value: "ready"}

// startEnvoy is rlsproc.StartEnvoy with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
// as given (rlsproc's settings turn it on; its default is off).
func startEnvoy(bin, redisAddr, runtimeRoot, logFile string, stopIncrement bool) (*rlsproc.Server, error) {
	return rlsproc.StartEnvoy(bin, redisAddr, runtimeRoot, logFile, probe, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT="+strconv.FormatBool(stopIncrement))
}

// rlsRun is what one run of a ShouldRateLimit server measured.
type rlsRun struct {
	name     string
	t        *tally
	took     time.Duration
	orgCount []int64 // the organisation's counter in Redis after the run (envoy's)
	commands int64
	scripts  int64
	reads    int64
}

// rlsDescriptors is one call's request: (org) and (org, user), decided as
// one.
func rlsDescriptors(c call) *rlspb.RateLimitRequest {
	org := orgName(c.org)
	return &rlspb.RateLimitRequest{Domain: "quota", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "org", Value: org}}},
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "org", Value: org}, {Key: "user", Value: userName(c.user)}}},
	}}
}

// runRLS sends the calls to s, on the Redis at rds (flushed first), and
// reads envoy's organisation counters from it when envoyKeys is set.
func runRLS(name string, s *rlsproc.Server, rds *rlsproc.Redis, o options, calls []call, envoyKeys bool) (*rlsRun, error) {
	if err := rds.Flush(); err != nil {
		return nil, err
	}
	before, err := rds.Counters()
	if err != nil {
		return nil, err
	}
	do := func(caller, i int, c call) outcome {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := s.Client.ShouldRateLimit(ctx, rlsDescriptors(c))
		switch {
		case err != nil:
			return unavailable
		case resp.OverallCode == rlspb.RateLimitResponse_OK:
			return admitted
		case resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT:
			return denied
		}
		return failed
	}
	r := &rlsRun{name: name}
	r.t, r.took = drive(calls, o.callers, o.orgs, o.users, do, -1, nil)
	after, err := rds.Counters()
	if err != nil {
		return nil, err
	}
	d := after.Delta(before)
	r.commands, r.scripts, r.reads = d.Commands, d.Scripts, d.Reads
	if envoyKeys {
		r.orgCount, err = envoyOrgCounters(rds.Addr, o.orgs)
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

// envoyOrgCounters reads envoyproxy/ratelimit's organisation counters:
// keys quota_org_<org>_<window start>, one window in a run.
func envoyOrgCounters(addr string, orgs int) ([]int64, error) {
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys, err := c.Keys(ctx, "quota_org_*").Result()
	if err != nil {
		return nil, err
	}
	counts := make([]int64, orgs)
	for _, k := range keys {
		rest := strings.TrimPrefix(k, "quota_org_")
		org, _, ok := strings.Cut(rest, "_")
		if !ok || strings.Contains(rest, "_user_") || !strings.HasPrefix(org, "org") {
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(org, "org"))
		if err != nil || n < 0 || n >= orgs {
			continue
		}
		v, err := c.Get(ctx, k).Int64()
		if err != nil {
			return nil, fmt.Errorf("GET %s: %v", k, err)
		}
		counts[n] += v
	}
	return counts, nil
}

// startPeerRedis starts a standalone redis-server for the ShouldRateLimit servers,
// and writes their configuration.
func startPeerRedis(work string, o options) (*rlsproc.Redis, string, error) {
	runtimeRoot := filepath.Join(work, "runtime")
	cfgDir := filepath.Join(runtimeRoot, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "quota.yaml"), []byte(quotaYAML(o)), 0o644); err != nil {
		return nil, "", err
	}
	dir := filepath.Join(work, "redis")
	os.Mkdir(dir, 0o755)
	rds, err := rlsproc.StartRedis(dir)
	return rds, runtimeRoot, err
}
