package redis

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/internal/braces"
)

// Errors returned by the store, besides those of package backend. Check
// them with errors.Is.
var (
	// ErrUnavailable is returned without calling Redis while the circuit
	// breaker is open: over the last Options.BreakerWindow, enough calls
	// failed (Options.BreakerMinCalls, Options.BreakerFailureRate), and
	// until one call probing Redis succeeds, the others wait for the
	// probe's answer and fail with this when it fails.
	// ErrLogin is wrapped by New's error when Redis answered but refused
	// the username or password (WRONGPASS, NOAUTH).
	ErrLogin = errors.New("sluice/backend/redis: login refused")
	// ErrTLS is wrapped by New's error when the TLS handshake failed: a
	// certificate that does not verify, a server that does not speak TLS.
	ErrTLS         = errors.New("sluice/backend/redis: TLS handshake failed")
	ErrUnavailable = errors.New("sluice/backend/redis: unavailable (circuit open: too many calls failed in the last window; one call at a time probes Redis)")
	// ErrCrossSlot is returned by a CompareAndSwap over a Cluster whose
	// keys lie in more than one swap group (see SwapGroup). The engine
	// never sends one; nothing is written.
	ErrCrossSlot = errors.New("sluice/backend/redis: compare-and-swap over keys of different hash tags on a Cluster")
)

// Defaults for Options.
const (
	DefaultKeyPrefix      = "sluice:"
	DefaultTimeout        = 50 * time.Millisecond
	DefaultConnectTimeout = 5 * time.Second
)

// Options configure a Store. The zero value (or nil) means the defaults.
type Options struct {
	// KeyPrefix starts every key the store writes; zero means
	// DefaultKeyPrefix. Give each Sluice deployment sharing one Redis its
	// own.
	KeyPrefix string
	// Timeout is every call's deadline: a decision waiting for a
	// connection from the pool, or for a new connection's dial and
	// handshake, fails once it has waited that long. Once the request is
	// written, the answer gets Timeout again, from the write, so a call
	// that first waited for a connection can last up to about twice
	// Timeout. That part judges Redis, not the gateway: a call whose
	// deadline passes while its request waits to be sent, or its reply
	// waits to be read, still waits until Timeout after the request was
	// written, and takes a reply that is already in the socket (see
	// docs/redis.md). Zero means
	// DefaultTimeout, 50ms: far above a healthy Redis' answer (well under a
	// millisecond on a local network), so that a gateway whose own CPU is
	// busy is not told its store is down, and short enough that a Redis
	// that does not answer gets on_store_error applied within 100ms. A
	// call past it fails with an error wrapping context.DeadlineExceeded.
	Timeout time.Duration
	// ConnectTimeout bounds New's first call, which checks that Redis
	// answers and loads the script; zero means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// BreakerWindow is the span over which the circuit breaker judges
	// Redis' error rate; zero means DefaultBreakerWindow, 1s. A failure is
	// a call that timed out, lost or could not make its connection, or was
	// answered that the server cannot serve now (LOADING, CLUSTERDOWN,
	// TRYAGAIN, MASTERDOWN); any other error reply is an answer.
	BreakerWindow time.Duration
	// BreakerMinCalls is how many calls must have ended within the window
	// before it is judged, a call counting as the keys it swapped (a batch
	// or an ApplyAll as several); zero means DefaultBreakerMinCalls, 20,
	// and a negative value disables the breaker.
	BreakerMinCalls int
	// BreakerFailureRate is the share of the window's calls that must have
	// failed for the circuit to open, above 0 and at most 1; zero means
	// DefaultBreakerFailureRate, 0.5. Open, calls fail at once with
	// ErrUnavailable, but for one at a time that probes Redis; the first
	// probe Redis answers closes the circuit.
	BreakerFailureRate float64
	// BreakerChanged, if set, is called when the breaker opens (true) and
	// when an answered probe closes it (false), from the goroutine of the
	// call that changed it: a place to log it. It must not block.
	BreakerChanged func(open bool)
	// EngineClock makes the store report no time of its own, so that the
	// engine's clock rules, and keep every record at least an hour of
	// Redis' time, since Redis expires records by its own clock, which a
	// FakeClock does not drive. Keeping a record past its TTL changes no
	// decision (it is then equivalent to none); it costs memory. For tests
	// and simulations that drive the engine with a FakeClock; never in
	// production.
	EngineClock bool
}

// Store is a backend.Swapper over Redis, standalone or Cluster. See the
// package doc.
type Store struct {
	c       goredis.UniversalClient // the commands' client: base, or its auto-pipeliner
	base    goredis.UniversalClient // the client: Pub/Sub, Cluster walks, Close
	pipe    *goredis.AutoPipeliner  // closed by Close when Open made it
	crowded *goredis.AutoPipeliner  // single-key swaps' client past crowd in flight; nil: never
	crowd   int32
	flying  atomic.Int32 // single-key swaps in flight
	own     bool         // Open made c, so Close closes it
	cluster bool
	prefix  string
	timeout time.Duration
	noClock bool
	brk     breaker
	closed  atomic.Bool
	// noSetGet is set once the server refused SET with NX and GET together
	// (before Redis 7.0): fresh records then go through the script too.
	noSetGet atomic.Bool
	// timed is when (time.Now's UnixNano) a reply last carried the
	// server's time.
	timed atomic.Int64
	batch batcher // single-key swaps past crowd in flight, but on a Cluster
	// stale, when Open made the client, is when (Unix ns) a call last
	// timed out or lost its connection: the pool drops the connections
	// made before (see lateConn.SyscallConn).
	stale *atomic.Int64
	// origin prefixes the store's announcements (Swap.Announce), so that
	// its own watch skips them.
	origin string
}

// timeEvery is how often a swap must carry the server's time: a fresh
// record's write (SET NX GET) carries none, and the engine steps with the
// last offset it learned meanwhile.
const timeEvery = time.Second

var (
	_ backend.Swapper = (*Store)(nil)
)

// New returns a store over c, which the caller keeps: Close does not close
// it. c must have ContextTimeoutEnabled set (go-redis ignores deadlines
// without it, and a decision must never outlive its Timeout). New checks
// that Redis answers and loads the compare-and-swap script, within
// Options.ConnectTimeout.
func New(c goredis.UniversalClient, opts *Options) (*Store, error) {
	return newStore(c, opts, false)
}

func newStore(c goredis.UniversalClient, opts *Options, own bool) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errors.New("sluice/backend/redis: nil client")
	}
	s := &Store{c: c, base: c, own: own, prefix: o.KeyPrefix, timeout: o.Timeout, noClock: o.EngineClock, origin: newOrigin()}
	switch cc := c.(type) {
	case *goredis.Client:
		if !cc.Options().ContextTimeoutEnabled {
			return nil, errors.New("sluice/backend/redis: the client must have ContextTimeoutEnabled set, or calls would not keep their deadline")
		}
	case *goredis.ClusterClient:
		if !cc.Options().ContextTimeoutEnabled {
			return nil, errors.New("sluice/backend/redis: the client must have ContextTimeoutEnabled set, or calls would not keep their deadline")
		}
		s.cluster = true
	}
	if s.prefix == "" {
		s.prefix = DefaultKeyPrefix
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	connect := o.ConnectTimeout
	if connect == 0 {
		connect = DefaultConnectTimeout
	}
	s.brk.init(&o)
	ctx, cancel := context.WithTimeout(context.Background(), connect)
	defer cancel()
	var sawTLS error // a TLS failure of an attempt, if the last error is only the deadline
	err := retry(ctx, func(ctx context.Context) error {
		err := c.Ping(ctx).Err()
		if err != nil && isTLSFailure(err) {
			sawTLS = err
		}
		return err
	})
	if err != nil && sawTLS != nil && !isTLSFailure(err) {
		err = fmt.Errorf("%w (an attempt before: %w)", err, sawTLS)
	}
	if err != nil {
		switch {
		case isLoginRefused(err):
			return nil, fmt.Errorf("sluice/backend/redis: Redis refused the login: %w: %w", ErrLogin, err)
		case isTLSFailure(err):
			return nil, fmt.Errorf("sluice/backend/redis: the TLS handshake with Redis failed: %w: %w", ErrTLS, err)
		}
		return nil, fmt.Errorf("sluice/backend/redis: Redis does not answer: %w", err)
	}
	if cc, ok := c.(*goredis.ClusterClient); ok {
		err := retry(ctx, func(ctx context.Context) error {
			return cc.ForEachMaster(ctx, func(ctx context.Context, n *goredis.Client) error {
				return loadScripts(ctx, n)
			})
		})
		if err != nil {
			return nil, fmt.Errorf("sluice/backend/redis: loading the script: %w", err)
		}
	} else if err := retry(ctx, func(ctx context.Context) error { return loadScripts(ctx, c) }); err != nil {
		return nil, fmt.Errorf("sluice/backend/redis: loading the script: %w", err)
	}
	return s, nil
}

// check refuses options out of range.
func (o *Options) check() error {
	if o.Timeout < 0 || o.ConnectTimeout < 0 || o.BreakerWindow < 0 {
		return fmt.Errorf("sluice/backend/redis: durations must not be negative (timeout %v, connect timeout %v, breaker window %v)", o.Timeout, o.ConnectTimeout, o.BreakerWindow)
	}
	if o.BreakerFailureRate < 0 || o.BreakerFailureRate > 1 {
		return fmt.Errorf("sluice/backend/redis: the breaker's failure rate must be above 0 and at most 1, got %v", o.BreakerFailureRate)
	}
	if o.BreakerWindow != 0 && o.BreakerWindow < breakerBuckets*time.Millisecond {
		return fmt.Errorf("sluice/backend/redis: the breaker's window must be at least %v, got %v", breakerBuckets*time.Millisecond, o.BreakerWindow)
	}
	return nil
}

// retry calls fn until it succeeds, fails with an error reply (an answer,
// not a failure to reach Redis), or ctx ends, waiting a little between
// tries; it returns fn's last error.
func retry(ctx context.Context, fn func(ctx context.Context) error) error {
	wait := 10 * time.Millisecond
	var last error // the failure of the attempt before, which says why
	for {
		err := fn(ctx)
		if last != nil && err != nil && ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)) {
			// The deadline ended this attempt midway: the one before it
			// failed for a reason (a refused connection), which this
			// attempt had no time to meet or clear.
			return last
		}
		if err == nil || !isFailure(err) || isTLSRefusal(err) || ctx.Err() != nil {
			return err // a certificate that does not verify will not later
		}
		last = err
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// isLoginRefused reports an error reply refusing the connection's login.
func isLoginRefused(err error) bool {
	for _, prefix := range []string{"WRONGPASS", "NOAUTH", "ERR invalid password", "ERR AUTH"} {
		if goredis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// isTLSFailure reports an error of the TLS handshake: a certificate that
// does not verify, or a peer that does not speak TLS.
func isTLSFailure(err error) bool {
	var (
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		record   tls.RecordHeaderError
		verify   *tls.CertificateVerificationError
	)
	return errors.Is(err, errHandshake) || errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &hostname) ||
		errors.As(err, &record) || errors.As(err, &verify) || strings.Contains(err.Error(), "tls: ")
}

// isTLSRefusal reports a TLS failure that trying again will not mend: a
// certificate that does not verify, a peer that answered with no TLS (a
// handshake that merely timed out may be a slow server).
func isTLSRefusal(err error) bool {
	return isTLSFailure(err) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded)
}

// loadScripts loads the compare-and-swap scripts into the server c reaches.
func loadScripts(ctx context.Context, c goredis.Scripter) error {
	for _, sc := range []*goredis.Script{casScript, casOneScript, casEachScript} {
		if err := sc.Load(ctx, c).Err(); err != nil {
			return err
		}
	}
	return nil
}

// ClientOptions say how Open reaches Redis.
type ClientOptions struct {
	// Addrs are host:port addresses: one for a standalone server, several
	// for the seed nodes of a Cluster, or the Sentinels when MasterName is
	// set.
	Addrs []string
	// MasterName, when set, is the name of the primary that the Sentinels
	// at Addrs watch: the store follows it across failovers.
	MasterName string
	// Username and Password authenticate (ACL or requirepass); empty for
	// none.
	Username, Password string
	// DB selects the database of a standalone server.
	DB int
	// TLS, when not nil, connects with TLS.
	TLS *tls.Config
	// PoolSize is the connections kept per node; zero means
	// DefaultPoolSize. A decision waiting for a free connection spends
	// its deadline waiting.
	PoolSize int
	// AutoPipeline sends every call through go-redis' AutoPipeliner,
	// which writes concurrent calls together, one write per connection.
	// Without it, the store does so only for single-key compare-and-swaps
	// (every decision but a multi-limit one) made while more than
	// PipelineAbove others are in flight: many callers over many keys,
	// where pipelining makes up to twice the decisions per second in
	// bench/REDIS.md's runs. A hot key's decisions, which the engine
	// coalesces into one call at a time, then keep the plain path, which
	// they are faster on. Measure yours with make bench-redis.
	AutoPipeline bool
	// PipelineAbove is how many single-key compare-and-swaps may be in
	// flight before the next goes through the AutoPipeliner (see
	// AutoPipeline); zero means DefaultPipelineAbove, a negative value
	// never.
	PipelineAbove int
}

// DefaultPipelineAbove is ClientOptions.PipelineAbove's default: a few hot
// keys at once stay on the plain path, many keys' decisions are pipelined.
const DefaultPipelineAbove = 4

// DefaultPoolSize is Open's connections per node: enough that 64
// concurrent decisions on different keys do not queue for one.
const DefaultPoolSize = 64

// Open connects to Redis as o says and returns a store over the client it
// makes, which Close closes. One address is a standalone server, several
// the seed nodes of a Cluster; with MasterName, the addresses are
// Sentinels.
func Open(o ClientOptions, opts *Options) (*Store, error) {
	if len(o.Addrs) == 0 {
		return nil, errors.New("sluice/backend/redis: no address")
	}
	// Every socket read, write and dial is bounded by the call deadline,
	// not only by the call's context: go-redis sets up a new connection
	// (dial, HELLO) under its own timeouts, and a Redis that accepts
	// connections but does not answer (stopped, or a black hole) would
	// otherwise hold a decision for those. New's first calls, which may
	// wait longer for a Redis that is starting, are retried up to
	// ConnectTimeout instead. A failed dial is not retried within a call:
	// a stopped Redis fails each call at once, not at its deadline.
	io := DefaultTimeout
	if opts != nil && opts.Timeout > 0 {
		io = opts.Timeout
	}
	stale := new(atomic.Int64)
	dial := dialer(io, o.TLS, stale)
	if o.PoolSize == 0 {
		o.PoolSize = DefaultPoolSize
	}
	var c goredis.UniversalClient
	switch {
	case o.MasterName != "":
		c = goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName: o.MasterName, SentinelAddrs: o.Addrs, Username: o.Username, Password: o.Password, DB: o.DB,
			TLSConfig: o.TLS, PoolSize: o.PoolSize, ContextTimeoutEnabled: true, ReadTimeout: io, WriteTimeout: io,
			DialTimeout: io, DialerRetries: 1, MaxRetries: -1, Dialer: dial,
		})
	case len(o.Addrs) == 1:
		c = goredis.NewClient(&goredis.Options{
			Addr: o.Addrs[0], Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLS,
			PoolSize: o.PoolSize, ContextTimeoutEnabled: true, ReadTimeout: io, WriteTimeout: io,
			DialTimeout: io, DialerRetries: 1, MaxRetries: -1, Dialer: dial,
		})
	default:
		if o.DB != 0 {
			return nil, errors.New("sluice/backend/redis: a Cluster has no databases but 0")
		}
		c = goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs: o.Addrs, Username: o.Username, Password: o.Password, TLSConfig: o.TLS,
			PoolSize: o.PoolSize, ContextTimeoutEnabled: true, ReadTimeout: io, WriteTimeout: io,
			DialTimeout: io, DialerRetries: 1, MaxRetries: -1, Dialer: dial,
		})
	}
	s, err := newStore(c, opts, true)
	if err != nil {
		c.Close()
		return nil, err
	}
	s.stale = stale
	if o.AutoPipeline {
		ap, err := c.AutoPipeline()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("sluice/backend/redis: auto-pipelining: %w", err)
		}
		s.c, s.pipe = ap, ap
	} else if o.PipelineAbove >= 0 {
		ap, err := c.AutoPipeline()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("sluice/backend/redis: auto-pipelining: %w", err)
		}
		s.crowded, s.pipe, s.crowd = ap, ap, int32(o.PipelineAbove)
		if s.crowd == 0 {
			s.crowd = DefaultPipelineAbove
		}
	}
	return s, nil
}

// Client returns the go-redis client under the store.
func (s *Store) Client() goredis.UniversalClient { return s.base }

// casScript is the compare-and-swap over several keys. For each key i,
// ARGV[3i-2] says what it must hold: "" no record, "=" followed by the
// record, or "#" followed by the record's SHA-1 in hex (for records longer
// than 40 bytes); ARGV[3i-1] what to do when every key holds what it
// should: "" leave the key as it is, "+" and milliseconds leave it but
// keep it at least that long (PEXPIRE when its PTTL is shorter), "0" delete
// it, or a TTL in milliseconds to SET ARGV[3i] with. ARGV past 3·#KEYS,
// when there are any, are a channel and the messages to PUBLISH on it once
// everything is written (the announcements of Swap.Announce). The reply is
// {1, µs} with the server's TIME in microseconds when it wrote, or {0, µs,
// current records...} (false for an absent one) when it wrote nothing.
var casScript = goredis.NewScript(`
local t = redis.call('TIME')
local cur, ok = {}, true
for i = 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  local e = ARGV[3*i-2]
  if e == '' then
    if v then ok = false end
  elseif not v then
    ok = false
  elseif string.byte(e) == 61 then
    if string.sub(e, 2) ~= v then ok = false end
  elseif redis.sha1hex(v) ~= string.sub(e, 2) then
    ok = false
  end
  cur[i] = v
end
local now = t[1] * 1000000 + t[2]
if not ok then
  return {0, now, unpack(cur)}
end
for i = 1, #KEYS do
  local ttl = ARGV[3*i-1]
  if ttl == '0' then
    redis.call('DEL', KEYS[i])
  elseif string.byte(ttl) == 43 then
    local want = tonumber(string.sub(ttl, 2))
    local left = redis.call('PTTL', KEYS[i])
    if left > 0 and left < want then
      redis.call('PEXPIRE', KEYS[i], want)
    end
  elseif ttl ~= '' then
    redis.call('SET', KEYS[i], ARGV[3*i], 'PX', ttl)
  end
end
local n = 3 * #KEYS
for j = n + 2, #ARGV do
  redis.call('PUBLISH', ARGV[n + 1], ARGV[j])
end
return {1, now}
`)

// casOneSource is the compare-and-swap of one key, the engine's every
// decision but ApplyAll's: no loop and no table but the reply's, and the
// expected record's kind apart from it, so that comparing makes no string.
// ARGV[1] is the kind of what KEYS[1] must hold: "" no record, "=" the
// record ARGV[2], "#" a record whose SHA-1 in hex is ARGV[2]. ARGV[3] is
// what to do when it does: "0" leave the key, "+" and milliseconds leave it
// but keep it at least that long, "-1" delete it, or a TTL in milliseconds
// to SET ARGV[4] with. The reply is casScript's.
const casOneSource = `
local v = redis.call('GET', KEYS[1])
local k, ok = ARGV[1], false
if k == '' then
  ok = not v
elseif v then
  if k == '=' then ok = v == ARGV[2] else ok = redis.sha1hex(v) == ARGV[2] end
end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
if not ok then
  return {0, now, v}
end
local ttl = ARGV[3]
if ttl == '-1' then
  redis.call('DEL', KEYS[1])
elseif string.byte(ttl) == 43 then
  local want = tonumber(string.sub(ttl, 2))
  local left = redis.call('PTTL', KEYS[1])
  if left > 0 and left < want then
    redis.call('PEXPIRE', KEYS[1], want)
  end
elseif ttl ~= '0' then
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ttl)
end
return {1, now}
`

var casOneScript = goredis.NewScript(casOneSource)

// digestOver is the length past which a swap sends the expected record's
// SHA-1 rather than the record.
const digestOver = 40

// CompareAndSwap implements backend.Swapper with one EVALSHA of the
// compare-and-swap script (EVAL when Redis has lost the script). The call
// is bounded by Options.Timeout and by ctx, whichever ends first; one that
// ctx ends returns an error wrapping ctx.Err() and is not counted by the
// circuit breaker, as the caller gave up, not Redis.
func (s *Store) CompareAndSwap(ctx context.Context, swaps []backend.Swap) (bool, [][]byte, int64, error) {
	if s.closed.Load() {
		return false, nil, 0, backend.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return false, nil, 0, fmt.Errorf("sluice/backend/redis: %w", err)
	}
	announce := 0
	for i := range swaps {
		if swaps[i].Announce && !swaps[i].Keep {
			announce++
		}
	}
	if len(swaps) == 1 && announce == 0 {
		return s.compareAndSwapOne(ctx, &swaps[0])
	}
	keys := make([]string, len(swaps))
	args := make([]any, 0, 3*len(swaps)+1+announce)
	for i, w := range swaps {
		if len(w.Key) == 0 {
			return false, nil, 0, backend.ErrEmptyKey
		}
		keys[i] = s.redisKey(w.Key)
		if s.cluster && i > 0 && tag(keys[i]) != tag(keys[0]) {
			return false, nil, 0, ErrCrossSlot
		}
		args = append(args, expect(w.Expected))
		switch {
		case w.Keep && w.TTL > 0:
			args = append(args, "+"+pxMillis(w.TTL, s.noClock), "")
		case w.Keep:
			args = append(args, "", "")
		case w.Value == nil || w.TTL <= 0:
			args = append(args, "0", "")
		default:
			// A copy: a call its caller stopped waiting for may be sent
			// after the engine has reused the swap's Value.
			args = append(args, pxMillis(w.TTL, s.noClock), bytes.Clone(w.Value))
		}
	}
	if announce > 0 {
		args = append(args, s.changeChannel())
		for _, w := range swaps {
			if w.Announce && !w.Keep {
				args = append(args, s.origin+string(w.Key))
			}
		}
	}
	var reply []any
	// The call weighs, for the breaker, as the keys it swaps, as a batch
	// weighs as its swaps: an ApplyAll's limits, or the calls the engine
	// commits together on a shared key, each a decision Redis serves or
	// fails.
	err := s.callBy(ctx, time.Now().Add(s.timeout), int64(len(swaps)), func(ctx context.Context) (err error) {
		reply, err = casScript.Run(ctx, s.c, keys, args...).Slice()
		return err
	})
	if err != nil {
		return false, nil, 0, err
	}
	ok, now, cur, err := parseReply(reply, len(swaps))
	if err != nil {
		return false, nil, 0, err
	}
	if s.noClock {
		now = 0
	}
	return ok, cur, now, nil
}

// bytesArg is a command argument that go-redis writes as it is
// (encoding.BinaryMarshaler): a pointer to one is boxed without
// allocating, as a []byte or a string would not be.
type bytesArg struct{ b []byte }

// MarshalBinary returns the argument's bytes.
func (a *bytesArg) MarshalBinary() ([]byte, error) { return a.b, nil }

// oneCall is the scratch of one single-key compare-and-swap: its command's
// arguments, pointing at buffers of its own, reused through oneCalls.
type oneCall struct {
	args               [8]any
	set                [7]any // SET key value PX ms NX GET, for a fresh record
	key, kind, exp, px bytesArg
	// val is the record to write, a copy in a buffer of the call's own:
	// a call its caller stopped waiting for (its context ended) may still
	// be sent after the engine has reused the swap's Value.
	val  bytesArg
	name string // the key as a string, on a Cluster (its slot is read from it)
}

var oneCalls = sync.Pool{New: func() any {
	c := &oneCall{}
	c.args = [8]any{"evalsha", casOneScript.Hash(), "1", &c.key, &c.kind, &c.exp, &c.px, &c.val}
	c.set = [7]any{"set", &c.key, &c.val, "px", &c.px, "nx", "get"}
	return c
}}

// processor runs a command: a client or an AutoPipeliner.
type processor interface {
	Process(ctx context.Context, cmd goredis.Cmder) error
}

// oneCallFor returns a pooled oneCall holding w's arguments (of
// casOneSource, and of SET NX GET for a fresh record).
func (s *Store) oneCallFor(w *backend.Swap) *oneCall {
	c := oneCalls.Get().(*oneCall)
	c.key.b = s.appendRedisKey(c.key.b[:0], w.Key)
	c.args[3] = &c.key
	if s.cluster {
		c.name = string(c.key.b)
		c.args[3] = &c.name
	}
	c.kind.b, c.exp.b = c.kind.b[:0], c.exp.b[:0]
	switch {
	case w.Expected == nil:
	case len(w.Expected) <= digestOver:
		c.kind.b = append(c.kind.b, '=')
		c.exp.b = append(c.exp.b, w.Expected...)
	default:
		sum := sha1.Sum(w.Expected)
		c.kind.b = append(c.kind.b, '#')
		c.exp.b = hex.AppendEncode(c.exp.b, sum[:])
	}
	c.val.b = c.val.b[:0]
	switch {
	case w.Keep && w.TTL > 0:
		c.px.b = appendPxMillis(append(c.px.b[:0], '+'), w.TTL, s.noClock)
	case w.Keep:
		c.px.b = append(c.px.b[:0], '0')
	case w.Value == nil || w.TTL <= 0:
		c.px.b = append(c.px.b[:0], "-1"...)
	default:
		c.px.b = appendPxMillis(c.px.b[:0], w.TTL, s.noClock)
		c.val.b = append(c.val.b[:0], w.Value...)
	}
	return c
}

// compareAndSwapOne is CompareAndSwap of one key, with casOneScript and
// pooled arguments.
func (s *Store) compareAndSwapOne(ctx context.Context, w *backend.Swap) (bool, [][]byte, int64, error) {
	if len(w.Key) == 0 {
		return false, nil, 0, backend.ErrEmptyKey
	}
	c := s.oneCallFor(w)
	var on processor = s.c
	if s.crowded != nil {
		crowded := s.flying.Add(1) > s.crowd
		defer s.flying.Add(-1)
		if crowded && !s.cluster {
			ok, cur, now, err := s.batched(ctx, c)
			if err == nil {
				oneCalls.Put(c)
			}
			// Else c is left as it is, not reused: a swap answered its
			// deadline error at its due may be in a call not yet written.
			return ok, cur, now, err
		}
		if crowded {
			on = s.crowded
		}
	}
	if fresh := w.Expected == nil && !w.Keep && w.Value != nil && w.TTL > 0; fresh && !s.noSetGet.Load() &&
		(s.noClock || time.Now().UnixNano()-s.timed.Load() < int64(timeEvery)) {
		if ok, cur, done, err := s.setFresh(ctx, c, on); done {
			return ok, cur, 0, err
		}
	}
	var reply []any
	err := s.callCtx(ctx, func(ctx context.Context) error {
		c.args[0], c.args[1] = "evalsha", casOneScript.Hash()
		cmd := goredis.NewCmd(ctx, c.args[:]...)
		err := on.Process(ctx, cmd)
		if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
			c.args[0], c.args[1] = "eval", casOneSource
			cmd = goredis.NewCmd(ctx, c.args[:]...)
			err = on.Process(ctx, cmd)
		}
		if err == nil {
			reply, err = cmd.Slice()
		}
		return err
	})
	if err != nil {
		// A command given up on at its deadline, or by a caller whose
		// context ended, may still be written later from its arguments
		// (by the goroutine callBy left it to): this scratch is neither
		// touched nor reused.
		return false, nil, 0, err
	}
	oneCalls.Put(c)
	ok, now, cur, err := parseReply(reply, 1)
	if err != nil {
		return false, nil, 0, err
	}
	if s.noClock {
		now = 0
	}
	s.timed.Store(time.Now().UnixNano())
	return ok, cur, now, nil
}

// setFresh writes c's record where the swap expects none with one native
// command, SET key value PX ms NX GET, which writes only if the key is
// absent and otherwise returns what it holds: the compare-and-swap with
// no script, about a third of its cost to Redis. It is the common swap of
// a key's first decision, and of one revisited after Redis forgot its
// record. Its reply carries no time (the engine steps with the offset it
// last learned; compareAndSwapOne sends the script at least every
// timeEvery). done is false when the server does not know the command
// (before Redis 7.0): the script is then used from now on.
func (s *Store) setFresh(ctx context.Context, c *oneCall, on processor) (ok bool, cur [][]byte, done bool, err error) {
	var held []byte
	found := false
	err = s.callCtx(ctx, func(ctx context.Context) error {
		cmd := goredis.NewStringCmd(ctx, c.set[:]...)
		err := on.Process(ctx, cmd)
		switch {
		case errors.Is(err, goredis.Nil):
			return nil // absent, and now written
		case err != nil:
			return err
		}
		held, found = []byte(cmd.Val()), true
		return nil
	})
	if err != nil && isReply(err) && !isTransient(err) {
		// Refused, not failed: a server that does not take NX with GET
		// (before 7.0), or an ACL without SET. The script is the way.
		s.noSetGet.Store(true)
		return false, nil, false, nil
	}
	if err != nil {
		return false, nil, true, err // see compareAndSwapOne: c is not touched
	}
	oneCalls.Put(c)
	if found {
		return false, [][]byte{held}, true, nil
	}
	return true, nil, true, nil
}

// TTLUnit implements backend.Swapper: Redis keeps a record for whole
// milliseconds (PX), its TTL rounded up.
func (s *Store) TTLUnit() time.Duration { return time.Millisecond }

// engineClockTTL is the least a record is kept with Options.EngineClock:
// the engine's clock, not Redis', says when it is due, so it must outlive
// any real time a test or a simulation runs for.
const engineClockTTL = time.Hour

// pxMillis returns the PX argument for a record kept ttl (rounded up to a
// millisecond: keeping a record longer never changes a decision).
func pxMillis(ttl time.Duration, engineClock bool) string {
	return string(appendPxMillis(nil, ttl, engineClock))
}

// appendPxMillis appends pxMillis' argument to dst.
func appendPxMillis(dst []byte, ttl time.Duration, engineClock bool) []byte {
	if engineClock {
		ttl = max(ttl, engineClockTTL)
	}
	return strconv.AppendInt(dst, int64((ttl+time.Millisecond-1)/time.Millisecond), 10)
}

// expect encodes what a swap expects to find.
func expect(v []byte) string {
	switch {
	case v == nil:
		return ""
	case len(v) <= digestOver:
		return "=" + string(v)
	default:
		sum := sha1.Sum(v)
		return "#" + hex.EncodeToString(sum[:])
	}
}

// parseReply reads a compare-and-swap script's reply for n keys: whether it
// wrote, the server's time in Unix ns, and when it did not write the
// records the keys hold (nil for an absent one).
func parseReply(reply []any, n int) (ok bool, now int64, cur [][]byte, err error) {
	if len(reply) < 2 {
		return false, 0, nil, fmt.Errorf("sluice/backend/redis: script replied %d values, want at least 2", len(reply))
	}
	flag, _ := reply[0].(int64)
	usec, isInt := reply[1].(int64)
	if !isInt || usec <= 0 || usec > math.MaxInt64/int64(time.Microsecond) {
		return false, 0, nil, fmt.Errorf("sluice/backend/redis: script replied a time of %v", reply[1])
	}
	now = usec * int64(time.Microsecond)
	if flag == 1 {
		return true, now, nil, nil
	}
	if len(reply) != 2+n {
		return false, 0, nil, fmt.Errorf("sluice/backend/redis: script replied %d records for %d keys", len(reply)-2, n)
	}
	cur = make([][]byte, n)
	for i, v := range reply[2:] {
		if str, isStr := v.(string); isStr {
			cur[i] = []byte(str)
		}
	}
	return false, now, cur, nil
}

// Get implements backend.Backend. Expiry is Redis' own: now is not used.
func (s *Store) Get(key []byte, _ int64) ([]byte, error) {
	if err := s.check(key); err != nil {
		return nil, err
	}
	var v []byte
	err := s.call(func(ctx context.Context) (err error) {
		v, err = s.c.Get(ctx, s.redisKey(key)).Bytes()
		if errors.Is(err, goredis.Nil) {
			v, err = nil, nil
		}
		return err
	})
	return v, err
}

// Put implements backend.Backend: expiresAt is read on the server's clock
// (PXAT).
func (s *Store) Put(key, value []byte, expiresAt int64) error {
	if err := s.check(key); err != nil {
		return err
	}
	return s.call(func(ctx context.Context) error {
		k := s.redisKey(key)
		if expiresAt <= 0 {
			return s.c.Set(ctx, k, value, 0).Err()
		}
		if s.noClock {
			return s.c.Set(ctx, k, value, engineClockTTL).Err()
		}
		return s.c.Do(ctx, "SET", k, value, "PXAT", (expiresAt+int64(time.Millisecond)-1)/int64(time.Millisecond)).Err()
	})
}

// Delete implements backend.Backend, and announces the deletion to every
// store watching (see WatchDeletes).
func (s *Store) Delete(key []byte) error {
	if err := s.check(key); err != nil {
		return err
	}
	if err := s.call(func(ctx context.Context) error { return s.c.Del(ctx, s.redisKey(key)).Err() }); err != nil {
		return err
	}
	s.announce(key)
	return nil
}

// Close stops the store; calls after it return backend.ErrClosed. It closes
// the client only when Open made it.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.own {
		if s.pipe != nil {
			s.pipe.Close()
		}
		return s.base.Close()
	}
	return nil
}

func (s *Store) check(key []byte) error {
	if s.closed.Load() {
		return backend.ErrClosed
	}
	if len(key) == 0 {
		return backend.ErrEmptyKey
	}
	return nil
}

// call runs fn under the call deadline and the circuit breaker.
func (s *Store) call(fn func(ctx context.Context) error) error {
	return s.callBy(context.Background(), time.Now().Add(s.timeout), 1, fn)
}

// callCtx is call bounded by the caller's ctx as well.
func (s *Store) callCtx(ctx context.Context, fn func(ctx context.Context) error) error {
	return s.callBy(ctx, time.Now().Add(s.timeout), 1, fn)
}

// SwapGroup implements backend.Swapper: on a Cluster, keys swap together
// only when they share a hash tag, the caller's key; on a standalone
// server every key is in one group.
func (s *Store) SwapGroup(key []byte) string {
	if !s.cluster {
		return ""
	}
	return tag(s.redisKey(key))
}

// The key layout. A namespaced key (engine.AppendKey: the namespace's length
// as a uvarint, the namespace, the caller's key) is stored as
//
//	prefix + "{" + caller key + "}:" + namespace
//
// so that every limit of one caller shares a Cluster hash tag, and
// ApplyAll over them is one script; a namespaced key whose caller key is a
// level's within its tenant (backend.NestedKey: a NUL byte, the tenant's
// key's length as a uvarint, the tenant's key, the level's own) as
//
//	prefix + "{" + tenant's key + "}{" + own key + "}:" + namespace
//
// so that every level of one tenant's request shares the tenant's hash
// tag, and ApplyAll over them is one script too; any other key as prefix
// + "{" + key + "}". In the caller's, the tenant's, the own and a plain
// key, '%', '{' and '}' are written as %25, %7B and %7D, so the tag is
// always the whole key (or the tenant's), and the forms never meet: the
// first '}' is followed by ':' in the first, by '{' in the second, by
// nothing in the last.
func (s *Store) redisKey(k []byte) string {
	return string(s.appendRedisKey(make([]byte, 0, len(s.prefix)+len(k)+4), k))
}

// appendRedisKey appends the Redis key of k to dst.
func (s *Store) appendRedisKey(dst, k []byte) []byte {
	dst = append(dst, s.prefix...)
	dst = append(dst, '{')
	n, w := binary.Uvarint(k)
	if w <= 0 || n > uint64(len(k)-w) {
		return append(braces.Append(dst, k), '}')
	}
	ns, key := k[w:w+int(n)], k[w+int(n):]
	if tenant, own, ok := backend.SplitNested(key); ok {
		dst = append(braces.Append(dst, tenant), '}', '{')
		key = own
	}
	dst = append(braces.Append(dst, key), '}', ':')
	return append(dst, ns...)
}

// tag returns the hash tag of a key redisKey made: what lies between its
// first '{' and the '}' after it.
func tag(k string) string {
	i := strings.IndexByte(k, '{')
	j := strings.IndexByte(k[i+1:], '}')
	return k[i+1 : i+1+j]
}
