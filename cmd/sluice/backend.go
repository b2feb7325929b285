package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/bolt"
	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/backend/pebble"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/metrics"
)

// backendFlags choose and configure the store under a command's engine:
// from the command line (addBackendFlags) or a configuration's store
// section (storeFlags), or both (over).
type backendFlags struct {
	name       string            // --backend: memory (the default), pebble, bolt or redis
	dir        string            // --dir: a durable backend's state directory
	durability engine.Durability // --durability, when durable is set
	durable    bool              // a durability was asked for; otherwise the backend's default
	// redis says how to reach Redis with name redis: Addrs and KeyPrefix
	// from --redis-addr and --redis-prefix, the rest from a
	// configuration's redis section.
	redis config.Redis
	// given holds the names of the flags given on the command line (nil
	// when none were parsed).
	given map[string]bool
	// from names where the store came from when not from the flags (such
	// as "gateway.yaml's store section"), for errors.
	from string
	// fakeClock reports that a FakeClock drives the engine, so the store
	// must not sweep by the wall clock, and Redis must not supply the time
	// (set by the command, not a flag).
	fakeClock bool
	// breakerChanged, set by a gateway, hears the Redis store's breaker
	// open and close (redis.Options.BreakerChanged).
	breakerChanged func(open bool)
}

// storeFile reads the store section of the file at path (a gateway
// configuration, or a store section alone): the store --store names, over
// which a command lays its store flags.
func storeFile(path string) (backendFlags, error) {
	st, err := config.LoadStore(path)
	if err != nil {
		return backendFlags{}, usagef("--store: %v", err)
	}
	b := storeFlags(st)
	b.from = path + "'s store section"
	return b, nil
}

// addStoreFileFlag registers --store, the file whose store section gives
// the store (storeFile), on fs and returns where its value lands.
func addStoreFileFlag(fs *flag.FlagSet) *string {
	return fs.String("store", "", "read the store from this `file`'s store section (a gateway configuration, or a store section alone); the store flags go over it")
}

// defaultRedis is a redis section with every default and no address.
func defaultRedis() config.Redis {
	return config.Redis{Timeout: config.DefaultRedisTimeout, KeyPrefix: config.DefaultRedisKeyPrefix, FleetSize: config.DefaultFleetSize}
}

// addBackendFlags registers --backend, --dir, --durability, --redis-addr and
// --redis-prefix on fs and returns where their values land.
func addBackendFlags(fs *flag.FlagSet) *backendFlags {
	f := &backendFlags{name: config.BackendMemory, redis: defaultRedis(), given: map[string]bool{}}
	given := func(name string, set func(string) error) func(string) error {
		return func(s string) error {
			if err := set(s); err != nil {
				return err
			}
			f.given[name] = true
			return nil
		}
	}
	fs.Func("backend", "the `store`: memory (the default), pebble, bolt or redis", given("backend", func(s string) error {
		f.name = s
		return nil
	}))
	fs.Func("dir", "a durable backend's state `directory` (required for pebble and bolt)", given("dir", func(s string) error {
		f.dir = s
		return nil
	}))
	fs.Func("durability", "a durable backend's `promise`: sync (every decision on disk before it is answered) or interval (flushed every 50ms; the default)", given("durability", func(s string) error {
		d, err := engine.ParseDurability(s)
		if err != nil {
			return errors.New("want sync or interval")
		}
		f.durability, f.durable = d, true
		return nil
	}))
	addRedisFlags(fs, &f.redis, given)
	return f
}

// redisFlags are the flags addRedisFlags registers, which apply to the
// redis backend only.
var redisFlags = []string{"redis-addr", "redis-prefix", "redis-timeout", "redis-breaker"}

// addRedisFlags registers --redis-addr, --redis-prefix, --redis-timeout and
// --redis-breaker on fs, setting r's Addrs, KeyPrefix, Timeout and Breaker;
// wrap marks a flag given.
func addRedisFlags(fs *flag.FlagSet, r *config.Redis, wrap func(string, func(string) error) func(string) error) {
	fs.Func("redis-addr", "with --backend redis: the Redis server's `host:port`; several, comma-separated, are the seed nodes of a Cluster", wrap("redis-addr", func(s string) error {
		addrs, err := parseRedisAddrs(s)
		if err != nil {
			return err
		}
		r.Addrs = addrs
		return nil
	}))
	fs.Func("redis-prefix", "with --backend redis: the `prefix` of every Redis key (default \"sluice:\"); give each deployment sharing a Redis its own", wrap("redis-prefix", func(s string) error {
		if s == "" {
			return errors.New("must not be empty")
		}
		r.KeyPrefix = s
		return nil
	}))
	fs.Func("redis-timeout", "with --backend redis: every call's `deadline`, connecting included (default 50ms); a call past it is a store error", wrap("redis-timeout", func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return fmt.Errorf("want a positive duration such as 50ms, got %q", s)
		}
		r.Timeout = d
		return nil
	}))
	fs.Func("redis-breaker", "with --backend redis: the circuit `breaker`: off, default, or window=DURATION,min_calls=N,failure_rate=R (default window=1s,min_calls=20,failure_rate=0.5)", wrap("redis-breaker", func(s string) error {
		b, err := config.ParseRedisBreaker(s)
		if err != nil {
			return err
		}
		r.Breaker = b
		return nil
	}))
}

// redisOptions returns the store options r gives, for an engine driven by
// a fake clock when fakeClock is set.
func redisOptions(r config.Redis, fakeClock bool) *redis.Options {
	o := &redis.Options{KeyPrefix: r.KeyPrefix, Timeout: r.Timeout, EngineClock: fakeClock,
		BreakerWindow: r.Breaker.Window, BreakerMinCalls: r.Breaker.MinCalls, BreakerFailureRate: r.Breaker.FailureRate}
	if r.Breaker.Off {
		o.BreakerMinCalls = -1
	}
	return o
}

// parseRedisAddrs reads --redis-addr: host:port[,host:port...].
func parseRedisAddrs(s string) ([]string, error) {
	var addrs []string
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		host, port, err := net.SplitHostPort(a)
		n, perr := strconv.Atoi(port)
		if err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("want host:port[,host:port...] such as 127.0.0.1:6379, got %q", a)
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// storeFlags returns the store a configuration's store section describes.
func storeFlags(s config.Store) backendFlags {
	f := backendFlags{name: s.Backend, dir: s.Dir, redis: s.Redis}
	if s.Backend == config.BackendPebble || s.Backend == config.BackendBolt {
		f.durability, f.durable = s.Durability, true
	}
	return f
}

// over returns base (a configuration's store) with the flags given in f put
// over it. A --backend other than base's starts from that backend's
// defaults: the file's settings are another backend's.
func (f *backendFlags) over(base backendFlags) backendFlags {
	out := base
	if f.given["backend"] && f.name != base.name {
		out = backendFlags{name: f.name, redis: defaultRedis()}
	} else if !f.given["backend"] {
		out.from = base.from
	}
	if f.given["dir"] {
		out.dir = f.dir
	}
	if f.given["durability"] {
		out.durability, out.durable = f.durability, true
	}
	if f.given["redis-addr"] {
		out.redis.Addrs = f.redis.Addrs
	}
	if f.given["redis-prefix"] {
		out.redis.KeyPrefix = f.redis.KeyPrefix
	}
	if f.given["redis-timeout"] {
		out.redis.Timeout = f.redis.Timeout
	}
	if f.given["redis-breaker"] {
		out.redis.Breaker = f.redis.Breaker
	}
	out.given, out.fakeClock = f.given, f.fakeClock
	return out
}

// usageError is a mistake in the command line, reported with exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// checkRedisFlags refuses the --redis-* flags for a store other than redis.
func (f *backendFlags) checkRedisFlags() error {
	for _, name := range redisFlags {
		if f.given[name] && f.name != config.BackendRedis {
			if f.from != "" {
				return usagef("--%s: only with --backend redis (the store is %s, from %s)", name, f.name, f.from)
			}
			return usagef("--%s: only with --backend redis (the store is %s)", name, f.name)
		}
	}
	return nil
}

// openBackend opens the store f describes and returns it with the engine
// options it needs. A *usageError reports a flag that names no store this
// build can open, or a setting that does not fit the store.
func openBackend(f backendFlags) (backend.Backend, engine.Options, error) {
	var opts engine.Options
	if f.durable {
		opts.Durability = f.durability
	}
	if err := f.checkRedisFlags(); err != nil {
		return nil, opts, err
	}
	// A fake clock's times mean nothing to a sweeper reading the wall clock.
	sweep := time.Duration(0)
	if f.fakeClock {
		sweep = -1
	}
	switch f.name {
	case config.BackendMemory:
		if f.dir != "" {
			return nil, opts, usagef("--dir: the memory backend keeps nothing on disk")
		}
		if f.durable {
			return nil, opts, usagef("--durability: the memory backend is not durable")
		}
		return memory.New(&memory.Options{SweepInterval: sweep}), opts, nil
	case config.BackendPebble, config.BackendBolt:
		if f.dir == "" {
			return nil, opts, usagef("--dir: required with --backend %s", f.name)
		}
		var (
			b   backend.Backend
			err error
		)
		if f.name == config.BackendPebble {
			b, err = pebble.Open(f.dir, &pebble.Options{SweepInterval: sweep})
		} else {
			b, err = bolt.Open(f.dir, &bolt.Options{SweepInterval: sweep})
		}
		if err != nil {
			return nil, opts, err
		}
		return b, opts, nil
	case config.BackendRedis:
		if f.dir != "" {
			return nil, opts, usagef("--dir: the redis backend keeps nothing on disk (give --redis-addr)")
		}
		if f.durable {
			return nil, opts, usagef("--durability: applies to pebble and bolt; Redis keeps its records as its own persistence says")
		}
		ro := redisOptions(f.redis, f.fakeClock)
		ro.BreakerChanged = f.breakerChanged
		s, err := openRedis(f.redis, ro)
		if err != nil {
			return nil, opts, err
		}
		return s, opts, nil
	default:
		return nil, opts, usagef("--backend %s: unknown backend (want memory, pebble, bolt or redis)", f.name)
	}
}

// openGatewayBackend is openBackend for a gateway (serve, rls): a durable
// store whose files are too damaged to open does not stop it. The damage
// is logged once, with the store, the path and what is damaged, and the
// gateway runs on a damagedStore, every decision of which is a store
// error that on_store_error decides, until the operator moves the
// directory away and restarts it.
func openGatewayBackend(f backendFlags, log *slog.Logger) (backend.Backend, engine.Options, error) {
	f.breakerChanged = func(open bool) {
		if open {
			log.Warn("redis: circuit breaker open: too many calls failed in its window; calls fail at once (on_store_error decides them) but one at a time, which probes Redis", "redis", strings.Join(f.redis.Addrs, ","))
			return
		}
		log.Info("redis: circuit breaker closed: Redis answered a probe; calls go to it again", "redis", strings.Join(f.redis.Addrs, ","))
	}
	b, opts, err := openBackend(f)
	if err != nil && errors.Is(err, backend.ErrCorrupt) {
		log.Error("the store is damaged: every decision is a store error, which on_store_error decides; stop the gateway, move the directory away (what callers spent is lost: each starts with a full budget) and start it again",
			"store", f.name, "dir", f.dir, "error", err)
		return damagedStore{err: err}, opts, nil
	}
	return b, opts, err
}

// damagedStore stands for a durable store that would not open because its
// files are damaged: every call fails with Open's error.
type damagedStore struct{ err error }

func (d damagedStore) Get([]byte, int64) ([]byte, error) { return nil, d.err }
func (d damagedStore) Put([]byte, []byte, int64) error   { return d.err }
func (d damagedStore) Delete([]byte) error               { return d.err }
func (d damagedStore) Close() error                      { return nil }

// openRedis connects to the Redis r describes. Without an address it is a
// usage error; a Redis that does not answer within the connect timeout is
// an error naming the addresses.
func openRedis(r config.Redis, opts *redis.Options) (*redis.Store, error) {
	if len(r.Addrs) == 0 {
		return nil, usagef("--redis-addr: required with --backend redis")
	}
	tlsConfig, err := r.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("redis tls: %w", err)
	}
	s, err := redis.Open(redis.ClientOptions{
		Addrs: r.Addrs, MasterName: r.MasterName, Username: r.Username, Password: r.Password, DB: r.DB, TLS: tlsConfig,
		AutoPipeline: r.AutoPipeline,
	}, opts)
	switch {
	case errors.Is(err, redis.ErrLogin):
		return nil, fmt.Errorf("Redis at %s: %w (check store.redis.username and the password: password, password_file or password_env)", strings.Join(r.Addrs, ","), err)
	case errors.Is(err, redis.ErrTLS):
		return nil, fmt.Errorf("Redis at %s: %w (check store.redis.tls: ca_file, server_name, and that the server speaks TLS)", strings.Join(r.Addrs, ","), err)
	case err != nil:
		return nil, fmt.Errorf("Redis at %s: %w (is it running there? the address is store.redis.addrs, or --redis-addr)", strings.Join(r.Addrs, ","), err)
	}
	return s, nil
}

// storeCollectors returns the Prometheus collectors of what b reports
// beyond the engine's statistics: the Redis store's circuit breaker.
func storeCollectors(b backend.Backend) []prometheus.Collector {
	s, ok := b.(*redis.Store)
	if !ok {
		return nil
	}
	return []prometheus.Collector{metrics.BreakerCollector(func() metrics.Breaker {
		st := s.Breaker()
		return metrics.Breaker{Open: st.Open, Opened: st.Opened, Rejected: st.Rejected, Calls: st.Calls, Failures: st.Failures}
	})}
}

// redisLogger passes the go-redis client's own log lines (a pool that
// cannot dial, say) to a slog.Logger at warning level; nil discards them.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	if l.log != nil {
		l.log.Warn("redis client: " + strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
	}
}

// setRedisLogger sends the go-redis client's log lines to log (nil:
// nowhere). The client has one logger per process.
func setRedisLogger(log *slog.Logger) { goredis.SetLogger(redisLogger{log}) }
