package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-go/sluice/backend/redis/redistest"
)

// calendarGateway is redisGateway with a monthly quota in place of the
// daily window: from the 1st at midnight in Reykjavik, whose clocks read
// UTC all year, so the month turns at a UTC midnight that
// waitAwayFromDayBoundary keeps the test clear of.
func calendarGateway(addr, prefix string, limit int) string {
	return strings.Replace(redisGateway(addr, prefix, "closed", limit, 2), "    window: 24h\n",
		"    calendar: month\n    timezone: Atlantic/Reykjavik\n    anchor: 1\n", 1)
}

// TestServeRedisCalendarFleet: two gateways on one Redis share a caller's
// monthly quota, and a gateway on a Redis that may evict any key says so
// at start, naming the rule.
func TestServeRedisCalendarFleet(t *testing.T) {
	t.Parallel()
	redistest.Skip(t)
	s := redistest.Start(t)
	s.Do(t, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
	waitAwayFromDayBoundary(t)
	up := upstream(t)
	cfg := filepath.Join(t.TempDir(), "monthly.yaml")
	writeFile(t, cfg, calendarGateway(s.Addr, testPrefix(t), 5))
	a := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--upstream", up.URL)
	b := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--upstream", up.URL)
	if got := fmt.Sprint(statuses(t, a, "ann", 3), statuses(t, b, "ann", 3)); got != "[200 200 200] [200 200 429]" {
		t.Errorf("ann on two gateways: %s, want 5 allowed in the month in all", got)
	}
	if keys := redisKeys(t, s, testPrefix(t)); len(keys) != 1 {
		t.Errorf("Redis holds %v under the prefix, want ann's one record", keys)
	}
	for _, want := range []string{"maxmemory-policy=allkeys-lru", "rule=orders", `per="month in Atlantic/Reykjavik from day 1"`} {
		if !strings.Contains(a.stderr.String(), want) {
			t.Errorf("the gateway's log does not warn of eviction with %s:\n%s", want, a.stderr)
		}
	}

	// Under noeviction, no warning.
	s.Do(t, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	c := startServe(t, "--config", cfg, "--listen", "127.0.0.1:0", "--upstream", up.URL)
	if got := fmt.Sprint(statuses(t, c, "ann", 1)); got != "[429]" {
		t.Errorf("ann on a third gateway: %s, want the month spent", got)
	}
	if strings.Contains(c.stderr.String(), "maxmemory-policy") {
		t.Errorf("a gateway on a Redis that does not evict warns:\n%s", c.stderr)
	}
}
