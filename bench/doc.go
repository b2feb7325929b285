// Package bench compares Sluice with the rate limiters Go users reach for,
// under the same workloads in the same run: golang.org/x/time/rate,
// github.com/sethvargo/go-limiter, github.com/ulule/limiter/v3,
// github.com/throttled/throttled/v2, github.com/go-chi/httprate,
// github.com/didip/tollbooth/v7 and, as an unkeyed floor,
// go.uber.org/ratelimit. It is its own module so that the peers never enter the
// main module's requirements.
//
// Every benchmark is named Benchmark<Workload>/<impl> so that benchstat
// groups the implementations of one workload into one table:
//
//   - Step, StepDenied: algo.Step alone, one record stepped in place.
//   - HotKey, HotKeyDenied: one key from one goroutine, every call allowed
//     (respectively denied).
//   - Keys100k: 100,000 distinct 20-byte keys in turn, every call allowed,
//     every record still live when its key comes round again.
//   - Keys100kRefilled: the same keys at a rate at which every bucket has
//     refilled before its key comes round again: the path most requests of
//     a real API take, where the stored record has expired.
//   - Keys100kDenied: the same keys, every one exhausted: every call denied,
//     the path of a limiter under attack.
//   - Keys100kShuffled, Keys100kShuffledDenied: Keys100k and
//     Keys100kDenied with the keys decided in one fixed random order
//     rather than the order they were created in. Many callers' requests
//     arrive in no order; walking the keys in creation order lets a limiter
//     that allocates one heap object per key (go-limiter, x/time/rate)
//     find each next object where the hardware prefetcher has already
//     brought it, and no deployment sees that order.
//   - Parallel10k, Parallel10kDenied: b.RunParallel over 10,000 keys, every
//     call allowed (respectively denied), each goroutine walking the keys
//     in the order they were created.
//   - Parallel10kShuffled, Parallel10kShuffledDenied: the same with the
//     keys created in one order and decided in one fixed random order, as
//     Keys100kShuffled: on two cores the walk in creation order is the one
//     where a limiter of one heap object per key finds the next object
//     prefetched, even when the other core wrote it last (PARALLEL.md).
//   - BytesPerKey: heap retained per key after 1,000,000 distinct keys,
//     reported as the B/key metric; its ns/op means nothing.
//   - TPMScenario: the tokens-per-minute scenario of BerriAI/litellm#18730
//     (tpm_test.go, TPM.md), one play of a minute per op: twenty
//     concurrent streaming requests on 100 tokens a minute, reported as
//     the tokens admitted (tokens/min) and their ratio to the limit
//     (x-limit). Sluice reserves and settles through the library
//     (sluice-…) and through sluice rls's two calls (sluice-rls-…);
//     checkthencount is a model of a limiter that checks the tokens
//     counted so far and counts a request's when it ends, not a library:
//     its ns/op means nothing.
//   - IndexLayout: no limiter, a model of a keyed store's lookup over
//     100,000 keys in two layouts (two-miss, the memory store's index of
//     slots pointing into an arena; one-miss, each entry whole in a 64-byte
//     cell of the index), in creation and in random order, with the bytes
//     per key of each (B/key): what one cache miss per decision instead of
//     two would buy, and cost.
//
// The implementations are Sluice's engine over the memory backend with each
// algorithm (sluice-<algorithm>, through engine.Apply with the system clock,
// as users run it, and sluice-token_bucket-fakeclock with a clock that never
// moves, to show the clock's share), x/time/rate as users deploy it per key
// (xtimerate: a sync.Map of *rate.Limiter), go-limiter's memorystore
// (golimiter), ulule/limiter's memory store (ulule), throttled's GCRA over
// its memstore (throttled), httprate's local counter deciding as its
// middleware does (httprate), tollbooth's LimitByKeys (tollbooth), and two
// floors: a get-modify-put of 16 bytes in a striped map (floor-stripedmap),
// the least any keyed limiter must do, and go.uber.org/ratelimit's single
// unkeyed limiter on HotKey only (floor-uberratelimit: it never denies, it
// sleeps in Take, so it runs at a rate at which it never sleeps).
//
// On the six memory workloads (HotKey, HotKeyDenied, Keys100k,
// Keys100kDenied, Parallel10k, Parallel10kDenied), and the two shuffled
// ones, the token bucket and GCRA also run in the opt-in variants a user may choose, named by
// suffixes (Variant):
//
//   - sluice-<algorithm>+coarse: the engine reads its time from an
//     engine.CoarseClock of engine.DefaultClockTick (1ms), set with
//     engine.Options.ClockTick: one atomic load per decision instead of a
//     clock read. Its decisions resolve to the tick: every request within
//     one tick is decided as if it arrived at the tick's start, so over any
//     real interval a limit may admit what it admits in that interval plus
//     one tick, and a request repeated exactly RetryAfter later may be
//     denied for up to one tick more (engine.CoarseClock says exactly).
//   - sluice-<algorithm>+key: each key is prepared once, before the timer
//     starts, with engine.Limit.Key and decided with engine.ApplyKeyInto,
//     as a caller that holds its key for many decisions does (a
//     connection's peer, a session): the namespaced key is neither built
//     nor hashed per decision, and the decision is written into the
//     caller's frame. The decisions are exactly Apply's.
//   - sluice-<algorithm>+coarse+key: both.
//
// cmd/report computes, per workload, the best Sluice row of any variant
// (the fakeclock row excepted: no deployment has a clock that never moves)
// against the fastest peer, beside the default rows' best; `make
// bench-quick` (cmd/quick) runs those workloads for the default and
// variant rows and the two fastest peers only, and prints the same ratios
// in about four minutes, each also paired: the median, over the rounds, of
// the two rows' ratio within a round.
//
// # Cores
//
// `go run ./cmd/quick -scaling` runs Parallel10k and Parallel10kDenied at
// -cpu 1,2,4,8. Every goroutine there walks all 10,000 keys, so every
// decision finds its key's record last written by another core: each
// implementation pays for the cache lines of one key moving between cores
// (x/time/rate: its limiter's two lines; Sluice: the record's entry, one or
// two lines, and its shard's lock line). What Sluice writes per decision
// is only that: the shard's first line (its lock, and the memo of the
// entry last found, which shares the line so costs no other) and the
// record's bytes. No count is shared between shards (keys are counted per
// shard and summed on read; only a store bounded by MaxKeys keeps a
// store-wide count, written by new keys alone); the Store's, the Engine's
// and the CoarseClock's fields that decisions read lie on lines nothing
// else writes (a layout test holds each to it), the clock's once a tick.
// Keys hash evenly over the shards (the 10,000 keys: 23 to 55 a shard for
// a mean of 39).
//
// Where a stripe lock costs more than a per-key one is when two cores
// want one shard at once. That happens to about (P-1)/shards of decisions
// times the share of a decision spent under the lock, and each such
// collision costs far more than a decision: sync.Mutex spins, then parks;
// and on a machine with more runnable threads than cores, a holder whose
// core is taken away mid-decision makes every decision that comes to its
// shard wait a scheduler slice. A mutex profile of Parallel10k at
// GOMAXPROCS 2 on a loaded 2-vCPU VM showed about 19 ns per decision
// waited on shard locks, and those waits did not shrink at 1,024 or 4,096
// shards: they were descheduled holders, which more shards do not avoid,
// not collisions, which they do. That, not a shared line, is why the
// parallel workloads gain little from a second core on a busy VM; and
// x/time/rate, whose locks are per key, meets it only when two goroutines
// reach the same key.
//
// For 16 or 64 cores, the store now has 64 shards per GOMAXPROCS by
// default (never under 256: 1,024 on 16, 4,096 on 64), so collisions stay
// as rare as on 2 cores, under 1% of decisions. What should then be
// expected: decisions on distinct keys scale with the cores until the
// cross-core transfer of each key's lines (tens of ns on one socket, more
// across sockets) dominates, as it does for every limiter that keeps
// state per key; a hot key shared by all cores scales with no limiter,
// since its state is one line that every decision writes; and a coarse
// clock helps more as cores grow, since its one line is read-only between
// ticks where each core's clock read costs the same on 64 cores as on one.
// These are expectations from the layout, not measurements: this suite
// has not been run on such a machine.
//
// Accuracy is measured apart from speed: cmd/accuracy replays one bursty
// trace, with a burst on each side of a window boundary, through every
// algorithm of every library and writes out/accuracy.md (allowed against
// the ideal, and the most admitted in any window).
//
// The durable-state workloads (durable_test.go) run the same engine over
// Pebble and bbolt through its in-memory tier, each store in a real
// directory, against the engine over the memory backend (memory-<algorithm>):
//
//   - DurableHotKey/<store>-<interval|sync>-<algorithm>: HotKey over a
//     durable store in each durability mode.
//   - DurableKeys100k, DurableParallel: Keys100k and Parallel10k (10,000
//     keys) over a durable store, Interval mode only.
//   - SyncConcurrency/<store>/callers-<n>: Sync mode with n goroutines, each
//     on its own keys, sharing b.N; decisions/s shows the group commit.
//   - RawStore, RawStoreBatch: the stores alone, Get+Put and WriteBatch of
//     1000 records (ns/key): the floor under the engine.
//   - ColdStart: time to the first decision after opening a store of
//     1,000,000 records, which must not load them all.
//
// The Redis-backed limiters are measured apart, by a program rather than
// testing.B, since their figures need concurrency levels and latency
// quantiles of their own: cmd/redisbench runs Sluice over backend/redis
// with each algorithm (sluice-<algorithm>, defaults as users run it, whose
// last-seen cache holds all 100,000 keys; and sluice-gcra+autopipeline, its
// store opened with redis.ClientOptions.AutoPipeline), the Redis peers the
// module proxy serves (redis_rate v10, throttled's go-redis v9 store,
// ulule's Redis store; go-redisstore, httprate-redis and rueidislimiter are
// refused by it) and three floors, one EVALSHA of a trivial script per call
// through go-redis, its AutoPipeline and rueidis, on one hot key and on
// 100,000 keys at 1, 16 and 64 callers against one redis-server it starts,
// with round trips per decision from the server's counters; then 4
// processes of 16 goroutines on one key per library, admitted against the
// limit. It needs redis-server on PATH
// (apt-get install -y redis-server) and takes about ten minutes:
//
//	cd bench && go run ./cmd/redisbench -out out/redis.md
//
// -duration, -rounds, -callers, -workloads and -libs shorten it (-list
// names the libraries); -addr uses a server already running, which it
// flushes. REDIS.md keeps the headline tables of the last full run. The
// Redis tests (redis_test.go, cmd/redisbench) run on `go test ./...` here
// when redis-server is installed and are skipped otherwise.
//
// Results are written by `make bench` to out/bench.txt; cmd/report turns
// them into RESULTS.md. The durable-state workloads are usually run on their
// own into out/durable.txt (see cmd/report), which the report reads too.
package bench
