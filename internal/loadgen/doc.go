// Package loadgen is a bounded, closed-loop HTTP load generator: a fixed
// number of workers each send one request, wait for its answer, and send the
// next, until a total request count or a deadline is reached. It records
// every request's latency and counts the answers by status code and by
// caller, with transport errors (no HTTP answer at all) counted apart.
//
// It exists to measure the sluice gateway end to end (bench/cmd/loadtest)
// and to drive it for long runs (internal/cmd/soak). Run is safe to call
// from several goroutines at once; a Result is a plain value owned by its
// caller.
package loadgen
