package main

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/redis"
)

// evictionCheckTimeout bounds serve's start-up question to Redis about its
// eviction policy.
const evictionCheckTimeout = time.Second

// warnEvictingRedis logs a warning when b is a Redis whose
// maxmemory-policy may evict any key (allkeys-lru, allkeys-lfu,
// allkeys-random) and a rule of rs counts over a day or longer: a
// month's count evicted is a month given back. A Redis that refuses
// CONFIG (as managed ones may) or does not answer in time is not
// checked.
func warnEvictingRedis(ctx context.Context, log *slog.Logger, b backend.Backend, rs *sluice.Ruleset) {
	s, ok := b.(*redis.Store)
	if !ok {
		return
	}
	long := longWindowRule(rs)
	if long == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, evictionCheckTimeout)
	defer cancel()
	res, err := s.Client().ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return
	}
	if policy := res["maxmemory-policy"]; strings.HasPrefix(policy, "allkeys-") {
		log.Warn("sluice serve: Redis may evict any key under its maxmemory-policy, and a rule counts over a day or more: a caller whose key is evicted gets its whole budget back; set maxmemory-policy noeviction",
			"maxmemory-policy", policy, "rule", long.Name(), "per", long.Per())
	}
}

// longWindowRule returns the first rule of rs whose windows last a day or
// longer (a calendar's, or a window of 24h or more), or nil.
func longWindowRule(rs *sluice.Ruleset) *sluice.CompiledRule {
	rules := rs.Rules()
	if d := rs.Default(); d != nil {
		rules = append(rules, d)
	}
	for _, c := range rules {
		r := c.Rule()
		if r.Calendar != "" || r.Window >= 24*time.Hour {
			return c
		}
	}
	return nil
}

// calendarOf returns the windows of c, a calendar rule, for people ("month
// in Europe/Berlin from day 15"); "" for any other rule.
func calendarOf(c *sluice.CompiledRule) string {
	if c.Rule().Calendar == "" {
		return ""
	}
	return c.Per()
}
