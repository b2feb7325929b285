// Package bench compares Sluice with the rate limiters Go users reach for
// first, golang.org/x/time/rate and github.com/sethvargo/go-limiter, under
// the same workloads. It is its own module so that the peers never enter the
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
//   - Parallel10k: b.RunParallel over 10,000 keys, every call allowed.
//   - BytesPerKey: heap retained per key after 1,000,000 distinct keys,
//     reported as the B/key metric; its ns/op means nothing.
//
// The implementations are Sluice's engine over the memory backend with each
// algorithm (sluice-<algorithm>, through engine.Apply with the system clock,
// as users run it, and sluice-token_bucket-fakeclock with a clock that never
// moves, to show the clock's share), x/time/rate as users deploy it per key
// (xtimerate: a sync.Map of *rate.Limiter), go-limiter's memorystore
// (golimiter), and a floor that does the least any keyed limiter must: a
// get-modify-put of 16 bytes in a striped map (floor-stripedmap).
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
// Results are written by `make bench` to out/bench.txt; cmd/report turns
// them into RESULTS.md. The durable-state workloads are usually run on their
// own into out/durable.txt (see cmd/report), which the report reads too.
package bench
