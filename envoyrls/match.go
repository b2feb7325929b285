package envoyrls

import (
	"strconv"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// Match is the limit one descriptor of a request falls under.
type Match struct {
	// Limit is the configured limit; nil when the descriptor matches none.
	Limit *Limit
	// Key is the caller's key under Limit.Path: the request's entries (a
	// share_threshold level's by its pattern instead of its value), so
	// every distinct descriptor has a budget of its own.
	Key string
	// Metric is the descriptor label of the limit's metrics: the limit's
	// path without the domain, or, with detailed_metric or
	// value_to_metric, a path built from the request's values.
	Metric string
}

// Match finds the limit of the descriptor entries in domain, as
// envoyproxy/ratelimit does: at each level the entry's key and value
// exactly, then the key's value patterns in file order, then the key alone;
// the limit applies only when it sits where the last entry lands. The
// zero Match (no limit) is returned for an unknown domain, for entries that
// leave the tree, and for a descriptor longer or shorter than the limit's
// depth.
func (c *Config) Match(domain string, entries []*rlv3.RateLimitDescriptor_Entry) Match {
	d := c.Domain(domain)
	if d == nil || len(entries) == 0 {
		return Match{}
	}
	n := d.root
	var found *node
	size := 0
	dynamic := false // the metric label depends on the request's values
	var path [8]step // the nodes walked, for the second pass
	for i, e := range entries {
		next, byPattern := n.child(e.GetKey(), e.GetValue())
		if next == nil {
			return Match{}
		}
		if i < len(path) {
			path[i] = step{next, byPattern}
		}
		size += len(e.GetKey()) + len(e.GetValue()) + 8
		dynamic = dynamic || next.valueToMetric || (byPattern && next.shareThreshold)
		if i == len(entries)-1 {
			found = next
			break
		}
		n = next
	}
	if found == nil || found.limit == nil {
		return Match{}
	}
	l := found.limit
	m := Match{Limit: l, Metric: l.metric}
	if l.Unlimited {
		return m
	}
	// The key and the metric are built from the path, known now to lead
	// to a limit: a request that matches nothing costs no allocation.
	key := make([]byte, 0, size)
	var metric strings.Builder
	dynamic = dynamic || l.DetailedMetric
	n = d.root
	for i, e := range entries {
		var next *node
		var byPattern bool
		if i < len(path) {
			next, byPattern = path[i].n, path[i].byPattern
		} else {
			next, byPattern = n.child(e.GetKey(), e.GetValue())
		}
		v := e.GetValue()
		if byPattern && next.shareThreshold {
			v = next.value
		}
		key = appendField(key, e.GetKey())
		key = appendField(key, v)
		n = next
		if !dynamic {
			continue
		}
		if metric.Len() > 0 {
			metric.WriteByte('.')
		}
		metric.WriteString(e.GetKey())
		switch {
		case byPattern && next.shareThreshold:
			metric.WriteString("_" + next.value) // the values share one budget
		case l.DetailedMetric || (next.valueToMetric && next.value == "") || (byPattern && next.valueToMetric):
			if e.GetValue() != "" {
				metric.WriteString("_" + e.GetValue())
			}
		case next.value != "":
			metric.WriteString("_" + next.value)
		}
	}
	m.Key = string(key)
	if dynamic {
		m.Metric = metric.String()
	}
	return m
}

// step is one level of a walk down the tree.
type step struct {
	n         *node
	byPattern bool
}

// child returns the child of n that an entry lands on, and whether it was
// found by a value pattern.
func (n *node) child(key, value string) (*node, bool) {
	if c := n.exact[entry{key, value}]; c != nil && (value != "" || c.value == "") {
		return c, false
	}
	for _, c := range n.patterns[key] {
		if wildcardMatch(c.parts, value) {
			return c, true
		}
	}
	return n.exact[entry{key, ""}], false
}

// wildcardMatch reports whether value matches the pattern split on "*"
// into parts: each "*" matches any run of characters, possibly empty.
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// appendField appends s with its length first, so that no two lists of
// strings give the same bytes.
func appendField(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	return append(b, s...)
}
