package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	redisrate "github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/engine"
)

// The Redis-backed limiters below all reach one redis-server at an address,
// each through its own client, built the way the library's documentation
// shows with the client's defaults (go-redis: a pool of ten connections per
// CPU; rueidis: auto-pipelining; Sluice: the client redis.Open makes, a pool
// of redis.DefaultPoolSize). Every limiter is a fresh one: it holds no
// record in memory that another limiter could have written.

// RedisConfig says how a Redis-backed limiter reaches Redis.
type RedisConfig struct {
	// Addr is the host:port of a standalone redis-server.
	Addr string
	// Timeout is Sluice's per-call deadline (redis.Options.Timeout); zero
	// means the store's default. The peers take none: they call Redis with
	// context.Background(), as their examples do.
	Timeout time.Duration
	// SwapCacheSize is Sluice's engine.SwapOptions.CacheSize, the last-seen
	// records it keeps; zero means the engine's default.
	SwapCacheSize int
	// AutoPipeline is Sluice's redis.ClientOptions.AutoPipeline: the
	// store sends its calls through go-redis' AutoPipeliner over the
	// client redis.Open makes.
	AutoPipeline bool
}

// SwapStats are the counters of a limiter that decides by compare-and-swap
// (Sluice): swaps sent and those that found another record than expected.
type SwapStats struct {
	Swaps, Conflicts uint64
}

// SwapCounter is implemented by a limiter that reports SwapStats.
type SwapCounter interface {
	SwapStats() SwapStats
}

// RedisLibrary is one Redis-backed limiter the Redis benchmarks compare: a
// name for the tables, the algorithm it runs, and how to build it at a rate.
type RedisLibrary struct {
	// Name is the row's name, such as "sluice-gcra" or "redis_rate".
	Name string
	// Algorithm is the Sluice algorithm name the library's own algorithm
	// is closest to ("" for a floor, which limits nothing).
	Algorithm algo.Name
	// Floor reports a row that limits nothing: one trivial script per
	// call, the cost of a round trip through its client.
	Floor bool
	// New builds the limiter at r over the Redis cfg names.
	New func(cfg RedisConfig, r Rate) (Limiter, error)
}

// RedisLibraries returns every Redis-backed limiter in a stable order: Sluice
// with each algorithm, then the peers the module proxy serves, then the
// floors.
func RedisLibraries() []RedisLibrary {
	var libs []RedisLibrary
	for _, name := range algo.Names {
		libs = append(libs, RedisLibrary{
			Name: "sluice-" + string(name), Algorithm: name,
			New: func(cfg RedisConfig, r Rate) (Limiter, error) { return NewRedisSluice(cfg, name, r) },
		})
	}
	// One variant of one algorithm: the store with every call through
	// go-redis' auto-pipelining (redis.ClientOptions.AutoPipeline); the
	// defaults pipeline a single-key swap only while more than
	// redis.DefaultPipelineAbove others are in flight. The engine's
	// default last-seen cache (engine.DefaultSwapCacheSize, 2^18) already
	// holds every key of the 100,000-key workload.
	libs = append(libs, RedisLibrary{Name: "sluice-gcra+autopipeline", Algorithm: algo.GCRAName, New: func(cfg RedisConfig, r Rate) (Limiter, error) {
		cfg.AutoPipeline = true
		return NewRedisSluice(cfg, algo.GCRAName, r)
	}})
	return append(libs,
		RedisLibrary{Name: "redis_rate", Algorithm: algo.GCRAName, New: func(cfg RedisConfig, r Rate) (Limiter, error) { return NewRedisRate(cfg, r) }},
		RedisLibrary{Name: "throttled-goredis", Algorithm: algo.GCRAName, New: func(cfg RedisConfig, r Rate) (Limiter, error) { return NewThrottledRedis(cfg, r) }},
		RedisLibrary{Name: "ulule-redis", Algorithm: algo.FixedWindowName, New: func(cfg RedisConfig, r Rate) (Limiter, error) { return NewUluleRedis(cfg, r) }},
		RedisLibrary{Name: "floor-goredis", Floor: true, New: func(cfg RedisConfig, _ Rate) (Limiter, error) { return NewGoRedisFloor(cfg, false) }},
		RedisLibrary{Name: "floor-goredis-autopipeline", Floor: true, New: func(cfg RedisConfig, _ Rate) (Limiter, error) { return NewGoRedisFloor(cfg, true) }},
		RedisLibrary{Name: "floor-rueidis", Floor: true, New: func(cfg RedisConfig, _ Rate) (Limiter, error) { return NewRueidisFloor(cfg) }},
	)
}

// RefusedRedisPeers are the Redis-backed peers the module proxy does not
// serve, with what it answered; they cannot be measured here.
var RefusedRedisPeers = []struct{ Module, Answer string }{
	{"github.com/sethvargo/go-redisstore", "403 Forbidden (\"This module version is not available\")"},
	{"github.com/go-chi/httprate-redis", "403 Forbidden (\"This module version is not available\")"},
	{"github.com/redis/rueidis/rueidislimiter", "404 Not Found (rueidis itself, the root module, is served and measured as a floor)"},
}

// RedisSluice is Sluice's engine over backend/redis applying one algorithm
// under the namespace "bench", through the public API only: redis.Open,
// engine.New and engine.Apply.
type RedisSluice struct {
	e *engine.Engine
	l engine.Limit
}

// NewRedisSluice returns Sluice over the Redis at cfg.Addr applying the named
// algorithm at r, with the system clock (the store's TIME rules, as in
// production) and every other option at its default but those cfg sets.
func NewRedisSluice(cfg RedisConfig, name algo.Name, r Rate) (*RedisSluice, error) {
	a, err := algo.New(name, algo.Params{Limit: r.Limit, Window: r.Window})
	if err != nil {
		return nil, err
	}
	opts := &redis.Options{KeyPrefix: "sluice:", Timeout: cfg.Timeout}
	st, err := redis.Open(redis.ClientOptions{Addrs: []string{cfg.Addr}, AutoPipeline: cfg.AutoPipeline}, opts)
	if err != nil {
		return nil, err
	}
	e, err := engine.New(st, &engine.Options{Swap: engine.SwapOptions{CacheSize: cfg.SwapCacheSize}})
	if err != nil {
		st.Close()
		return nil, err
	}
	return &RedisSluice{e: e, l: engine.Limit{Namespace: "bench", Algorithm: a}}, nil
}

// Allow applies the limit to key at cost 1.
func (s *RedisSluice) Allow(key string) (bool, error) {
	d, err := s.e.Apply(context.Background(), s.l, key, 1)
	return d.Allowed, err
}

// SwapStats returns the engine's compare-and-swap counters.
func (s *RedisSluice) SwapStats() SwapStats {
	st := s.e.Stats()
	return SwapStats{Swaps: st.Swaps, Conflicts: st.Conflicts}
}

// Close closes the engine and its store, which closes the client.
func (s *RedisSluice) Close() { _ = s.e.Close() }

// newGoRedis returns a go-redis client of the Redis at cfg.Addr with
// go-redis' defaults, as the peers' examples make it.
func newGoRedis(cfg RedisConfig) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: cfg.Addr})
}

// RedisRate is github.com/go-redis/redis_rate/v10: GCRA in one Lua script
// (EVALSHA, EVAL once the server has lost it), keyed "rate:<key>".
type RedisRate struct {
	c   *goredis.Client
	lim *redisrate.Limiter
	l   redisrate.Limit
}

// NewRedisRate returns redis_rate at r.Limit per r.Window with a burst of
// r.Limit.
func NewRedisRate(cfg RedisConfig, r Rate) (*RedisRate, error) {
	if r.Limit <= 0 || r.Limit > math.MaxInt32 || r.Window <= 0 {
		return nil, fmt.Errorf("bench: redis_rate needs 0 < limit ≤ %d and a positive window, got %+v", math.MaxInt32, r)
	}
	c := newGoRedis(cfg)
	if err := c.Ping(context.Background()).Err(); err != nil {
		c.Close()
		return nil, err
	}
	return &RedisRate{c: c, lim: redisrate.NewLimiter(c), l: redisrate.Limit{Rate: int(r.Limit), Burst: int(r.Limit), Period: r.Window}}, nil
}

// Allow asks for one event on key.
func (x *RedisRate) Allow(key string) (bool, error) {
	res, err := x.lim.Allow(context.Background(), key, x.l)
	if err != nil {
		return false, err
	}
	return res.Allowed > 0, nil
}

// Close closes the client.
func (x *RedisRate) Close() { _ = x.c.Close() }

// ThrottledRedis is github.com/throttled/throttled/v2's GCRA over its
// go-redis v9 store (store/goredisstore.v9): the algorithm runs in Go; the
// store reads the key and the server's TIME in one pipeline, then writes by
// SETNX and EXPIRE for a new key or by a compare-and-swap script sent whole
// (EVAL) for an existing one, retrying the read on a lost swap.
type ThrottledRedis struct {
	c  *goredis.Client
	rl *throttled.GCRARateLimiterCtx
}

// NewThrottledRedis returns throttled's GCRA of r.Limit per r.Window with a
// burst of r.Limit (MaxBurst r.Limit-1) over Redis, keys prefixed
// "throttled:".
func NewThrottledRedis(cfg RedisConfig, r Rate) (*ThrottledRedis, error) {
	if r.Limit <= 0 || r.Limit > math.MaxInt32 || r.Window < time.Duration(r.Limit) {
		return nil, fmt.Errorf("bench: throttled needs 0 < limit ≤ %d and an emission interval of at least 1ns, got %+v", math.MaxInt32, r)
	}
	c := newGoRedis(cfg)
	if err := c.Ping(context.Background()).Err(); err != nil {
		c.Close()
		return nil, err
	}
	st, err := goredisstore.NewCtx(c, "throttled:")
	if err != nil {
		c.Close()
		return nil, err
	}
	rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{
		MaxRate:  throttled.PerDuration(int(r.Limit), r.Window),
		MaxBurst: int(r.Limit) - 1,
	})
	if err != nil {
		c.Close()
		return nil, err
	}
	return &ThrottledRedis{c: c, rl: rl}, nil
}

// Allow asks for one unit of key's quota.
func (t *ThrottledRedis) Allow(key string) (bool, error) {
	limited, _, err := t.rl.RateLimitCtx(context.Background(), key, 1)
	return !limited && err == nil, err
}

// Close closes the client.
func (t *ThrottledRedis) Close() { _ = t.c.Close() }

// UluleRedis is github.com/ulule/limiter/v3 over its Redis store: a fixed
// window per key opened by the key's first request (INCRBY and PEXPIRE in one
// Lua script, EVALSHA), counted under "limiter:<key>".
type UluleRedis struct {
	c   *goredis.Client
	lim *ulule.Limiter
}

// NewUluleRedis returns ulule's limiter of r.Limit requests per r.Window over
// Redis.
func NewUluleRedis(cfg RedisConfig, r Rate) (*UluleRedis, error) {
	if r.Limit <= 0 || r.Window < time.Millisecond {
		return nil, fmt.Errorf("bench: ulule needs a positive limit and a window of at least 1ms, got %+v", r)
	}
	c := newGoRedis(cfg)
	st, err := ululeredis.NewStore(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &UluleRedis{c: c, lim: ulule.New(st, ulule.Rate{Period: r.Window, Limit: r.Limit})}, nil
}

// Allow counts a request for key, as ulule's middlewares do with Get, and
// reports whether the count is within the limit.
func (u *UluleRedis) Allow(key string) (bool, error) {
	c, err := u.lim.Get(context.Background(), key)
	if err != nil {
		return false, err
	}
	return !c.Reached, nil
}

// Close closes the client.
func (u *UluleRedis) Close() { _ = u.c.Close() }

// floorScript is the trivial script of the floors: it touches nothing, so a
// call costs one round trip and the script's dispatch, nothing more.
const floorScript = "return 1"

// GoRedisFloor sends one EVALSHA of floorScript per call through go-redis,
// plain (a connection from the pool per call) or through the client's
// blocking AutoPipeline (go-redis v9.23, experimental), which batches
// concurrent callers' commands into pipelines. It limits nothing.
type GoRedisFloor struct {
	c      *goredis.Client
	ap     *goredis.AutoPipeliner
	on     goredis.Scripter
	script *goredis.Script
}

// NewGoRedisFloor returns the go-redis floor, through AutoPipeline when
// auto is set.
func NewGoRedisFloor(cfg RedisConfig, auto bool) (*GoRedisFloor, error) {
	f := &GoRedisFloor{c: newGoRedis(cfg), script: goredis.NewScript(floorScript)}
	f.on = f.c
	if auto {
		ap, err := f.c.AutoPipeline()
		if err != nil {
			f.c.Close()
			return nil, err
		}
		f.ap, f.on = ap, ap
	}
	if err := f.script.Load(context.Background(), f.on).Err(); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Allow runs the script once with key as its key and returns true.
func (f *GoRedisFloor) Allow(key string) (bool, error) {
	if err := f.script.Run(context.Background(), f.on, []string{key}).Err(); err != nil {
		return false, err
	}
	return true, nil
}

// Close closes the auto-pipeliner and the client.
func (f *GoRedisFloor) Close() {
	if f.ap != nil {
		_ = f.ap.Close()
	}
	_ = f.c.Close()
}

// RueidisFloor sends one EVALSHA of floorScript per call through rueidis,
// whose client pipelines concurrent callers' commands on shared connections
// by default (auto-pipelining). It limits nothing.
type RueidisFloor struct {
	c      rueidis.Client
	script *rueidis.Lua
}

// NewRueidisFloor returns the rueidis floor, with client-side caching off
// (the script uses none).
func NewRueidisFloor(cfg RedisConfig) (*RueidisFloor, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{cfg.Addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	f := &RueidisFloor{c: c, script: rueidis.NewLuaScript(floorScript)}
	if _, err := f.Allow("warm"); err != nil {
		c.Close()
		return nil, err
	}
	return f, nil
}

// Allow runs the script once with key as its key and returns true.
func (f *RueidisFloor) Allow(key string) (bool, error) {
	if err := f.script.Exec(context.Background(), f.c, []string{key}, nil).Error(); err != nil {
		return false, err
	}
	return true, nil
}

// Close closes the client.
func (f *RueidisFloor) Close() { f.c.Close() }

// RedisLibraryNamed returns the library of that name from RedisLibraries.
func RedisLibraryNamed(name string) (RedisLibrary, error) {
	for _, l := range RedisLibraries() {
		if l.Name == name {
			return l, nil
		}
	}
	return RedisLibrary{}, fmt.Errorf("bench: no Redis library %q", name)
}

// The Redis workloads' rates. Both admit every call of a run and keep every
// key's record live between its visits (no bucket refills, no window ends
// while the benchmark runs): the steady-state allowed path, where the
// record a limiter last saw is still the one in Redis.
var (
	// RedisHotRate is a billion units per ten years (a unit refills every
	// 0.3 s): no run on one key can spend it.
	RedisHotRate = Rate{Limit: algo.MaxLimit, Window: algo.MaxWindow}
	// RedisKeysRate is a million units per ten years (a unit refills every
	// 5 minutes), for 100,000 keys each visited a few dozen times at most.
	RedisKeysRate = Rate{Limit: 1_000_000, Window: algo.MaxWindow}
	// RedisSlidingLogHotRate replaces RedisHotRate for the sliding log,
	// whose record holds an entry per admitted unit in its window: 100 per
	// microsecond keeps a hot key's log to a few entries (see
	// SlidingLogUnlimited).
	RedisSlidingLogHotRate = SlidingLogUnlimited
	// RedisSlidingLogKeysRate replaces RedisKeysRate for the sliding log:
	// a thousand per ten years, a log of one entry per visit.
	RedisSlidingLogKeysRate = Rate{Limit: 1000, Window: algo.MaxWindow}
	// RedisAccuracyRate is the accuracy trial's limit: a thousand per
	// thousand hours, so that a bucket refills one unit an hour and a
	// trial of seconds may admit exactly 1,000.
	RedisAccuracyRate = Rate{Limit: 1000, Window: 1000 * time.Hour}
)

// RedisRateFor returns the rate lib runs at on the hot key (hot) or on
// 100,000 keys.
func RedisRateFor(lib RedisLibrary, hot bool) Rate {
	switch {
	case lib.Algorithm == algo.SlidingLogName && hot:
		return RedisSlidingLogHotRate
	case lib.Algorithm == algo.SlidingLogName:
		return RedisSlidingLogKeysRate
	case hot:
		return RedisHotRate
	}
	return RedisKeysRate
}
