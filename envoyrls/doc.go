// Package envoyrls is Sluice behind Envoy's external rate-limit protocol: a
// server of envoy.service.ratelimit.v3.RateLimitService that answers under
// the configuration format of envoyproxy/ratelimit, the protocol's
// reference server, unchanged, and decides each request through the
// decision core every door shares (sluice.Decider).
//
// # Configuration
//
// A Domain is one domain's tree of descriptors, as envoyproxy/ratelimit's
// format gives it: each a key with an optional value (exact, or a pattern
// where each "*" matches any run of characters), an optional rate_limit
// (unit, requests_per_unit, unit_multiplier, unlimited, name, replaces,
// and Sluice's algorithm and burst) and the flags shadow_mode, quota_mode,
// detailed_metric, value_to_metric and share_threshold. NewDomain builds
// one from Descriptor values, checked as envoyproxy/ratelimit checks a
// file; NewConfig gathers domains into the Config a Server answers under.
// Every error is a *config.Error naming the field (package config's Error,
// matching sluice.ErrInvalidConfig).
//
// The package reads no file: envoyrls/rlsfile reads envoyproxy/ratelimit's
// YAML files into domains and watches them, envoyrls/xds takes them from a
// control plane, and envoyrls/rlsmetrics exports a Server's Metrics to
// Prometheus. A program that embeds the server with domains built in Go
// imports none of YAML, fsnotify or Prometheus.
//
// # Matching
//
// Config.Match finds the limit of one descriptor as envoyproxy/ratelimit
// does: level by level, an entry's exact key and value first, then the
// key's value patterns in the order given, then the key alone; the limit
// applies only where the request's last entry lands, so a descriptor with
// more entries than the configuration's depth matches nothing. A
// descriptor that matches nothing is answered OK.
//
// # Deciding
//
// The server is an adapter around sluice.Decider: its descriptors are
// matched to limits, keys and costs (the request's batch), and the
// Decider's decisions rendered as a RateLimitResponse, its headers made as
// every door makes them. Server.ShouldRateLimit decides all the
// descriptors of a request as one Partial batch (sluice.Batch), with
// engine.Engine.ApplyAll: nothing is spent unless every limited descriptor
// allows, and a rejected request spends nothing (where
// envoyproxy/ratelimit counts every hit, and increments each descriptor
// separately). Each descriptor's budget is a Sluice record whose namespace
// is the configuration path of its limit and whose key is the request's
// entries, so a reload that keeps a limit's place keeps what callers spent.
// The cost is hits_addend: the descriptor's own when set (zero checks
// without spending), else the request's, else 1. A shadow_mode limit is
// decided and counted but never denies; an unlimited one is always OK; a
// quota_mode limit over its quota never denies either: its status is OK
// with 0 remaining, and the dynamic metadata names it, as in
// envoyproxy/ratelimit; the others are decided again without such a
// denial, and spend. replaces drops the replaced limits. A store error is
// answered UNAVAILABLE (the Decider's FailClosed), which Envoy decides by
// its failure_mode_deny.
//
// # Settling
//
// A limit marked settle_on_stream_done (RateLimit.SettleOnStreamDone) takes
// costs known when the stream is done, from the call Envoy's rate-limit
// filter makes then (a rate_limits entry with apply_on_stream_done). The
// request path spends an estimate, as any request; an allowed request's
// answer carries a handle of it in its dynamic metadata (the field
// SettleKey), and the stream-done call's descriptor brings the handle back
// as its last entry, with the actual cost as its hits_addend: the limit
// settles the difference through engine.Engine.Resume, charged even past
// the limit or refunded where the algorithm can (see SettleKey). Such a
// call is never denied. A descriptor with is_negative_hits is refused
// InvalidArgument: it names no instant to refund at.
//
// # Bounds
//
// A request past Options.MaxDescriptors, MaxEntries or MaxValueBytes is
// refused InvalidArgument, and a call whose context has ended decides
// nothing. A value longer than MaxKeptValue is kept in a key as a hash of
// KeptHashLen bytes, and in a metric label cut to a prefix and a hash, so
// neither grows with the values a client sends. A cost above a limit's
// capacity is refused with no duration_until_reset: no wait lets it pass.
//
// A Server is safe for concurrent use; SetConfig swaps the configuration
// atomically, and requests in flight finish under the one they took.
package envoyrls
