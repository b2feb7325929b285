// Package algo holds Sluice's rate-limiting algorithms as pure step
// functions.
//
// An Algorithm is built once from validated Params and then answers one
// question, any number of times, from any goroutine:
//
//	next, d := a.Step(state, now, cost)
//
// state is the key's current record as encoded by package codec (nil for a
// key never seen or expired), now is Unix nanoseconds and cost is how much
// the request spends. The result is the record to store and the Decision. A
// step never reads a clock, never locks and never does I/O, which is what lets
// the same algorithm run unchanged on every store, and it never panics: a
// record that does not decode is treated as absent and reported through
// Decision.CorruptState.
//
// The six algorithms, by their Names (the same word in a configuration file):
//
//   - token_bucket: a bucket of capacity tokens refilled continuously at
//     limit/window. Absorbs a burst, then settles to the rate. The default
//     for a public API.
//   - leaky_bucket: a queue of depth capacity draining at limit/window. It
//     admits what a token bucket would, but every admitted request carries
//     the Delay until the work ahead of it has drained: a shaper.
//   - fixed_window: one counter per window aligned to the Unix epoch. The
//     cheapest, and it lets twice the limit through across a boundary.
//   - sliding_log: the times of the admitted requests in the trailing window.
//     Exact, and O(limit) bytes per key: for small limits on expensive
//     actions such as logins.
//   - sliding_counter: this window's count plus the previous one's weighted
//     by how much of it still overlaps the trailing window. Approximate, two
//     counters per key, no boundary burst.
//   - gcra: the generic cell rate algorithm, the token bucket kept as one
//     timestamp. The smallest record.
//
// Capacity is the burst where one is set (bucket algorithms only) and the
// limit otherwise; the refill or drain rate is always limit/window.
//
// fixed_window and sliding_counter may instead count the windows of a
// calendar (Params.Calendar): days, weeks, months or years in a time zone,
// from an anchor such as a billing day. Such windows vary in length (a day
// of 23 or 25 hours across a change of summer time, a month of 28 to 31
// days); the record is the same as for windows of one length, and the
// sliding counter weighs the previous window by the part of it a span as
// long as the current window, ending now, still covers (SlidingCounter).
// The bucket algorithms and sliding_log refuse a calendar: they have no
// windows to align.
//
// Arithmetic is exact integer arithmetic on nanoseconds and nano-tokens, so a
// denied request repeated exactly RetryAfter later is allowed, and one
// nanosecond earlier it is not (the sliding counter's RetryAfter follows the
// reference design, which points at the next window when the current one
// alone is over the limit). What exactness costs is rounding, always against
// the caller: a bucket's level is whole nano-tokens as of a whole nanosecond,
// so a refill forgoes under a nanosecond's worth at each admitted request;
// GCRA counts a whole number of nanoseconds per token. A sliding log keeps
// entry times to the nanosecond, so its answers equal the reference design's
// at every window boundary.
//
// A rule whose limit, window or burst changes keeps what each caller spent,
// for every algorithm: the records hold what was spent (or queued, or
// counted) rather than what is left. Raising the capacity gives a throttled
// caller the difference at once; lowering it never leaves anyone above the
// new capacity, and a caller who spent more waits for the excess to refill.
// GCRA's record names the interval its TAT was counted in, and keeps
// refilling at that rate until an admission rewrites it in the new one.
//
// A cost known only after the request (tokens a language model used, rows a
// query scanned) is settled with Charge and Refund: the request steps with
// an estimate, then the difference is charged, even past the capacity into
// a bounded debt, or refunded where the algorithm can take it back exactly.
// settle.go states the bound and the refund rule of each algorithm.
//
// A clock that steps backwards is treated as not having moved: nothing is
// refunded. The record only knows the times of admitted requests (a denial
// writes nothing), so "not moved" is measured from those.
package algo
