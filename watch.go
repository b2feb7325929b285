package sluice

import "github.com/sluice-go/sluice/algo"

// Watcher is told of the decisions that deny a caller or leave it near its
// limit, for a live view of who is being throttled (package throttled
// keeps one). A door of rules (Door, and the Decider under it) tells it,
// after the engine has returned and never under a stripe lock, of each
// rule's decision in a batch that
//
//   - denied (a shadow rule's would-be denial included), or
//   - allowed and left at most a tenth of the capacity (Near).
//
// Every other decision costs the door one comparison and no call. A
// Watcher must be fast, must not block and must be safe for concurrent
// use; it is told the rule as configured (not the caller's override or a
// local share) and the caller's key, which it must copy to keep. The
// Envoy door's limits are not rules: it tells no Watcher.
type Watcher interface {
	// Watch records that the caller of key was denied under rule, or
	// allowed near its limit: d is the rule's decision.
	Watch(rule *CompiledRule, key string, d algo.Decision)
}

// Near reports whether d denied, or allowed leaving at most a tenth of its
// capacity (d.Limit): the decisions a Watcher is told of.
func Near(d algo.Decision) bool { return !d.Allowed || d.Remaining*10 <= d.Limit }
