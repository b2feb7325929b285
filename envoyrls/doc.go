// Package envoyrls is Sluice behind Envoy's external rate-limit protocol: a
// server of envoy.service.ratelimit.v3.RateLimitService that reads the
// configuration files of envoyproxy/ratelimit, the protocol's reference
// server, unchanged, and decides each request with package engine.
//
// # Configuration
//
// ParseFile reads one YAML file, one domain, in envoyproxy/ratelimit's
// format: a domain and a tree of descriptors, each a key with an optional
// value (exact, or a pattern where each "*" matches any run of characters),
// an optional rate_limit (unit second, minute, hour, day, week, month or
// year, requests_per_unit, unit_multiplier, unlimited, name, replaces) and
// the flags shadow_mode, quota_mode, detailed_metric, value_to_metric and
// share_threshold; metadata is accepted and ignored. Load reads a file or
// every *.yaml and *.yml file of a directory, one domain each, into a
// Config. Sluice adds two optional fields to rate_limit: algorithm (one of
// algo.Names; fixed_window when absent, so a migrated file answers as it
// did) and burst (the capacity of a bucket algorithm). Every error is a
// *config.Error naming the file, the line and the field.
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
// Server.ShouldRateLimit decides all the descriptors of a request as one
// with engine.Engine.ApplyAll: nothing is spent unless every limited
// descriptor allows, and a rejected request spends nothing (where
// envoyproxy/ratelimit counts every hit, and increments each descriptor
// separately). Each descriptor's budget is a Sluice record whose namespace
// is the configuration path of its limit and whose key is the request's
// entries, so a reload that keeps a limit's place keeps what callers spent.
// The cost is hits_addend: the descriptor's own when set (zero checks
// without spending), else the request's, else 1. A shadow_mode limit is
// decided and counted but never denies; an unlimited one is always OK; a
// quota_mode limit over its quota never denies either: its status is OK
// with 0 remaining, and the dynamic metadata names it, as in
// envoyproxy/ratelimit; replaces drops the replaced limits.
//
// A Server is safe for concurrent use; SetConfig swaps the configuration
// atomically, and requests in flight finish under the one they took.
package envoyrls
