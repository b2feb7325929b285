package main

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/sluice-go/sluice/config"
)

// The --redis-* flags go over a file's redis section field by field, and
// what is not given keeps the file's; redisOptions hands them to the store.
func TestRedisFlagsOverTheFile(t *testing.T) {
	file := config.Store{Backend: config.BackendRedis, Redis: config.Redis{
		Addrs: []string{"10.0.0.1:6379"}, KeyPrefix: "orders:", Timeout: time.Second,
		Breaker: config.RedisBreaker{MinCalls: 5},
	}}
	for _, c := range []struct {
		args        []string
		timeout     time.Duration
		breaker     config.RedisBreaker
		minCalls    int // in the store's options
		prefix      string
		description string
	}{
		{nil, time.Second, config.RedisBreaker{MinCalls: 5}, 5, "orders:", "no flags: the file's"},
		{[]string{"--redis-timeout", "80ms"}, 80 * time.Millisecond, config.RedisBreaker{MinCalls: 5}, 5, "orders:", "the timeout only"},
		{[]string{"--redis-breaker", "off"}, time.Second, config.RedisBreaker{Off: true}, -1, "orders:", "breaker off"},
		{[]string{"--redis-breaker", "window=3s,failure_rate=0.9", "--redis-prefix", "x:"}, time.Second,
			config.RedisBreaker{Window: 3 * time.Second, FailureRate: 0.9}, 0, "x:", "a breaker of its own: the file's min_calls goes"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := addBackendFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatalf("%s: %v", c.description, err)
		}
		got := f.over(storeFlags(file))
		if got.redis.Timeout != c.timeout || got.redis.Breaker != c.breaker || got.redis.KeyPrefix != c.prefix || got.redis.Addrs[0] != "10.0.0.1:6379" {
			t.Errorf("%s: %+v", c.description, got.redis)
		}
		o := redisOptions(got.redis, false)
		if o.Timeout != c.timeout || o.BreakerMinCalls != c.minCalls || o.BreakerWindow != c.breaker.Window || o.BreakerFailureRate != c.breaker.FailureRate || o.KeyPrefix != c.prefix {
			t.Errorf("%s: store options %+v", c.description, o)
		}
	}
}
