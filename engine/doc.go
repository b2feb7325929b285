// Package engine applies rate-limit algorithms to keys held in a backend,
// atomically per key.
//
// For each call the engine reads the clock once (Options.Clock: SystemClock
// by default, or with Options.ClockTick a CoarseClock that a goroutine
// advances every tick, so that decisions resolve to the tick), prefixes the
// limit's namespace to the caller's key (so two rules never share a
// counter), and steps the key's record with the limit's algorithm. New
// chooses, once, by the path interface the backend implements (see package
// backend), how that step is made atomic. The dispatch lives in one file
// (store.go); no call re-decides it.
//
// # The striped path
//
// For every store that can lend a lock: the engine hashes the key with
// backend.Hash and takes the lock of stripe hash&(stripes-1). Under that
// lock it reads the key's record, runs the step and writes the new record
// with the expiry the step asked for (its TTL: the time until the record
// is equivalent to none), so read-step-write is indivisible for every key
// while keys on different stripes never wait for each other. The lock is:
//
//   - over a backend.Striped (the memory backend), the store's own
//     partition lock: one lock per decision, and the record is stepped in
//     place without an allocation. Over a bare memory store, Apply is one
//     call (inprocess.go) on the table.Table the store is: the key is built
//     on the stack, looked up once under the shard lock, stepped where it
//     lies by the algorithm's own step, and only its expiry written back
//     through the table's Ref; the limit's capacity is read only to explain
//     a denial. Where the shard's last decision denied, a decision first
//     reads the record without the lock (table.ReadUnlocked, on amd64): a
//     denial is answered from that copy and writes nothing, not even the
//     lock; a decision that would spend is made again under the lock. ApplyKeyInto decides a Key prepared once with Limit.Key
//     exactly as Apply decides the rule and caller it was made from,
//     without building or hashing the key again, into the caller's
//     Decision. Any other Striped store, such as the memory store behind a
//     test's fault-injecting wrapper, takes the same steps through the
//     interface.
//   - over a backend.Durable (Pebble, bbolt), the partition lock of the
//     in-memory tier, a table.Table which holds the records in use, and
//     writes them back as Options.Durability says.
//   - over any other backend, the engine's own stripe locks
//     (Options.Stripes).
//
// # The compare-and-swap path
//
// A store across a network (Redis) cannot lend a lock; it implements
// backend.Swapper instead, an atomic multi-key compare-and-swap. The engine
// then keeps the last record it saw per key, steps it locally and commits
// the new record with one compare-and-swap expecting the record it stepped.
// The path has its own options (Options.Swap, a SwapOptions) and files:
// swap.go (the path, its clock and its last-seen records), swap_queue.go
// (one key's queue of callers and their single-key decisions), swap_all.go
// (ApplyAll: its queueing, local denials and a call over several groups)
// and swap_group.go (the commit of a call over one group, with the calls
// queued on its keys). Its promise:
//
//   - One round trip per decision when the last-seen record is current. A
//     key's first request expects no record, which is right for a new key.
//   - On a mismatch the store returns the current record and the engine
//     steps again on it, at most SwapOptions.Retries times; then the call
//     fails with ErrStore wrapping ErrContention. Nothing is ever admitted
//     without a commit, and a failed call spends nothing.
//   - A stale or lost last-seen record (another process wrote the key, or
//     the bounded cache of last-seen records, SwapOptions.CacheSize, let it
//     go) costs one more round trip, never a wrong decision: the
//     compare-and-swap catches the stale expectation.
//   - The last-seen record follows the store's clock: once its expiry
//     has passed by the store's time (give or take a round trip), the
//     swap expects no record, so a key revisited after the store forgot it
//     costs one round trip, not a mismatch and a second. A store that
//     keeps records for whole units of time (backend.Swapper.TTLUnit:
//     Redis, whole milliseconds) is reckoned with the TTL rounded up as it
//     rounds it.
//   - Concurrent decisions on one key in one process coalesce: they queue
//     on the key, and one of them steps every queued request in order on
//     the local record and commits them all with one compare-and-swap; each
//     caller gets its own decision. A process has at most one
//     compare-and-swap in flight per key, however many callers crowd it:
//     an ApplyAll queues for each of its keys in turn (in the order of the
//     keys' bytes, so two never wait for each other) and owns them while
//     its swap is out. The ApplyAll calls queued behind it on those keys
//     whose other keys are free are decided with it, in one
//     compare-and-swap over all their keys: each spends only if every one
//     of its requests allows, stepped as if the calls came one after
//     another, so calls sharing a key (a tenant's) share its round trip.
//     Callers in one process never conflict with each other on the store;
//     a conflict means another process wrote (or the store forgot a
//     record within a reply's travel of when the engine reckoned it would).
//   - A request that the key's last-seen record already denies is denied
//     from it, with no round trip: a decision never refunds, and a record
//     only moves towards "more spent" except by time, which the step
//     accounts for, and by a refund (a Reservation settled below its
//     estimate, or a Lease released), which announces itself, so the store's record denies it
//     too. A refund's compare-and-swap carries backend.Swap.Announce: the
//     store tells the other processes watching it (Redis: a PUBLISH in the
//     same script as the write, so no round trip of its own), and each
//     forgets the key's last-seen record, as after a Reset, so that its
//     next request goes to the store. That keeps the cache for every
//     limit, refunding or not, rather than only for limits that never
//     refund: a limit cannot tell whether a caller will settle below its
//     estimate, and a refund is rarer than a denial. Until the
//     announcement arrives (Pub/Sub's travel, or never for a watcher whose
//     connection was down), a process may deny from its stale record what
//     the store would allow, for at most that denial's RetryAfter; it
//     never allows anything the store denies. The refunding process keeps
//     its own record: it wrote it. A caller hammering
//     a denied key costs the store nothing until its RetryAfter passes,
//     but for one round trip when the store would forget the record
//     before its caller is full again (a rule whose rate was lowered since
//     it was written): that denial's compare-only swap lengthens the
//     record's expiry (backend.Swap.Keep with a TTL).
//     Such a denial never turns an allow into a deny while the store's
//     clock runs forwards; its Remaining and RetryAfter are the last-seen
//     record's, so in a fleet they may be more generous than the store's
//     (the retry is then decided against the store). When the clock steps
//     back past a record another process wrote, the store steps that
//     record as if no time had passed, while the last-seen one is stepped
//     at the clock's time: it may deny what the store allows, until the
//     time that record was written at the latest, since the last-seen
//     record has spent no more. A Reset in another process reaches the others through the
//     store's watch of deletions (backend.Swapper.WatchDeletes: Redis
//     Pub/Sub), which forgets the key; a watcher
//     that missed it denies until the denial's RetryAfter at most. A hot
//     reload needs nothing: the new rule steps the last-seen record, so a
//     raised limit admits at once. SwapOptions.ConfirmDenials sends every
//     denial to the store instead.
//   - A decision that spends nothing otherwise (a Peek, a denial found on
//     the store's record) is confirmed against the store by a compare-only
//     swap (backend.Swap.Keep), in the same round trip as the batch's
//     writes.
//   - A Reservation's settle is one more request in the key's queue: a
//     charge or a refund stepped on the key's record in order with the
//     decisions queued with it, and committed by their compare-and-swap.
//     Settles queued behind a swap in flight cost no round trip of their
//     own; a settle on an idle key costs one (it is not held back to wait
//     for a later decision: a settle returns once it is committed).
//   - Time is the store's: each reply carries the store's clock, the
//     engine keeps the offset to its own and steps with the store's time
//     (learned by an empty compare-and-swap before the first decision).
//     Engines whose local clocks differ decide as one engine. A step never
//     moves a record's time backwards: a time before the record's own is
//     treated as no time passed.
//   - ApplyAll with one request is that request's single-key decision.
//     With more, it is one compare-and-swap over all its keys; when any
//     request is denied the swap only compares, so nothing is spent. A
//     denial the last-seen records show (as a single request's would be
//     answered locally) is answered from them with no round trip, before
//     queueing for the keys and again once they are owned; the other
//     requests' decisions are then those of their last-seen records. When the
//     keys of one call fall in several of the store's groups
//     (backend.Swapper.SwapGroup: a
//     per-user and a global limit on different Redis Cluster slots), each
//     group after the first is confirmed by a compare-only swap, then the
//     groups are committed one by one in the order of the requests. If
//     another process spends a later group's key to denial between its
//     confirmation and its commit (one round trip), the call is a denial
//     and the groups committed before it stay spent: a refused request
//     may then be charged to the other limits; nothing is ever admitted
//     beyond any limit. Reset deletes the record and forgets the
//     last-seen one.
//
// # Reservations
//
// Reserve decides a request on an estimate of its cost, as Apply does, and
// returns a Reservation; its Settle, once the actual cost is known,
// charges the difference (even past the limit, into a debt bounded per
// algorithm) or refunds it where the algorithm can take it back exactly
// (package algo's Charge and Refund say per algorithm). A settle is a
// read-step-write of the key like a decision, on every path: under the
// stripe lock over the memory store and the durable tier (whose
// Durability applies to it as to a decision), through the key's queue
// over a backend.Swapper. A reservation never settled keeps its estimate.
//
// # Leases
//
// Acquire takes a slot of a concurrency limit (algo.ConcurrencyName) as a
// lease, by a step of the limit like a decision, and Lease.Release (or
// Release by the lease's id) gives it back by a settle-like step, a
// refund of the lease: on every path, under the stripe lock or through the
// key's queue. A release frees a slot, so over a backend.Swapper it
// announces itself as a refund does, and the other processes stop
// answering the key's denials from their last-seen records; a lease that
// expires needs nothing announced, since every process steps the record at
// the store's time and sees it gone. A release that meets a store error may
// be retried: it names its lease, and frees it at most once.
//
// # Context
//
// Every call that can reach a store (Apply, ApplyKeyInto, Peek, ApplyAll,
// Reserve, Reservation.Settle, Reset, Record, Flush) takes the caller's
// context.Context first. What it does depends on the path:
//
//   - over a backend.Striped store (the memory store), the context is
//     never read: the decision is made in the process, with nothing to
//     wait for, and costs what it cost without one;
//   - over a backend.Durable store (Pebble, bbolt) and a plain Backend, a
//     context done before the call spends returns an error wrapping
//     ctx.Err() (errors.Is finds context.Canceled or
//     context.DeadlineExceeded) and spends nothing; a call that has
//     started runs to its end (the store's methods take no context);
//   - over a backend.Swapper (Redis), the same before the call queues for
//     its keys. A single-key decision queued behind its key's
//     compare-and-swap leaves the queue when its context ends, spending
//     nothing (an ApplyAll waiting to own its keys waits its turn). The
//     context bounds the compare-and-swap itself
//     (backend.Swapper.CompareAndSwap: with Redis, the earlier of its
//     deadline and the store's Timeout wins, and a cancellation ends the
//     wait at once); a swap so ended after it was sent may have been
//     written, as after a store error. Callers coalesced into one
//     compare-and-swap share it: one caller's cancellation does not end
//     it (the others wait for its answer), and its deadline is the latest
//     of theirs when each has one. Reset and Record check the context
//     first; the store's Delete and Get take none, and keep its own
//     deadline.
//
// Such an error is not an ErrStore: the store did not fail, and it is
// counted neither in Stats.StoreErrors nor by Redis' circuit breaker. A
// door passes the request's context (package httplimit the
// http.Request's, package grpclimit the call's), so a request whose
// client has gone or whose deadline has passed spends nothing on a store
// that reads it.
//
// # Locks
//
// Lock order: stripe locks are taken in ascending stripe order (ApplyAll
// takes several); no other lock is held while taking one, and no user
// callback, logging or metrics work runs under one. Over a durable backend,
// the group commit's queue mutex is taken under a stripe lock (to enqueue a
// write in order), never the other way round: the commit leader holds no
// stripe lock while it writes, and takes them only after releasing the
// queue. The tier's flush mutex is outermost: a flush takes stripe locks
// one at a time under it. On the compare-and-swap path no lock is held
// across a call to the store: a shard's mutex guards only its queues and
// last-seen records.
//
// An Engine is safe for concurrent use. A denial is a Decision, never an
// error; errors are the sentinel values below, wrapped with detail.
package engine
