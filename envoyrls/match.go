package envoyrls

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

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
		size += fieldSize(e.GetKey()) + fieldSize(e.GetValue())
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
		key = appendKeyField(key, e.GetKey())
		key = appendKeyField(key, v)
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
				metric.WriteByte('_')
				writeLabelValue(&metric, e.GetValue())
			}
		case next.value != "":
			metric.WriteString("_" + next.value)
		}
	}
	m.Key = string(key)
	if dynamic {
		m.Metric = boundLabel(metric.String())
	}
	return m
}

// Bounds on what a request's values cost where they are kept: in keys (in
// the store, for the limit's window) and in metric labels (for the life
// of the Metrics).
const (
	// MaxKeptValue is the longest entry key or value a stored key holds as
	// it is; a longer one is held as KeptHashLen bytes whatever its
	// length.
	MaxKeptValue = 64
	// KeptHashLen is the length of a hashed field: '#' and 32 hex digits,
	// the first 16 bytes of the value's SHA-256 (as serve keeps an API
	// key). A field held as it is starts with its length in decimal
	// digits, so a hashed one never equals one held as it is.
	KeptHashLen = 1 + 32
	// MaxLabelValue is the longest request value a metric label carries
	// as it is; a longer one is its first labelPrefix bytes, '#' and 32
	// hex digits of its SHA-256: longer than MaxLabelValue, so never the
	// label of a value carried as it is.
	MaxLabelValue = 64
	// MaxLabel is the longest descriptor label a request's values build
	// (detailed_metric, value_to_metric); a longer one is cut the same
	// way, to labelPrefix bytes and the hash of the whole.
	MaxLabel = 256
)

// labelPrefix is how much of a long value, or label, a label keeps before
// its hash.
const labelPrefix = 48

// fieldSize is an upper bound of the bytes appendKeyField appends for s.
func fieldSize(s string) int {
	if len(s) > MaxKeptValue {
		return KeptHashLen
	}
	return len(s) + 4 // up to "64:"
}

// appendKeyField appends s to a stored key: as appendField does, or, when
// s is longer than MaxKeptValue, as '#' and the hex of the first 16 bytes
// of its SHA-256, so that a key costs a bounded size whatever the values.
func appendKeyField(b []byte, s string) []byte {
	if len(s) <= MaxKeptValue {
		return appendField(b, s)
	}
	b = append(b, '#')
	return hex.AppendEncode(b, hash16(s))
}

// hash16 returns the first 16 bytes of the SHA-256 of s.
func hash16(s string) []byte {
	h := sha256.New()
	io.WriteString(h, s)
	var sum [sha256.Size]byte
	return h.Sum(sum[:0])[:16]
}

// writeLabelValue writes v to a metric label, cut (cutLong) when it is
// longer than MaxLabelValue.
func writeLabelValue(w *strings.Builder, v string) {
	if len(v) <= MaxLabelValue {
		w.WriteString(v)
		return
	}
	w.WriteString(cutLong(v))
}

// boundLabel returns label, cut (cutLong) when it is longer than MaxLabel.
func boundLabel(label string) string {
	if len(label) <= MaxLabel {
		return label
	}
	return cutLong(label)
}

// cutLong returns the first labelPrefix bytes of s (fewer, to end on a
// whole UTF-8 character), '#' and 32 hex digits of the SHA-256 of the whole.
func cutLong(s string) string {
	n := labelPrefix
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	b := make([]byte, 0, n+1+32)
	b = append(b, s[:n]...)
	b = append(b, '#')
	return string(hex.AppendEncode(b, hash16(s)))
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
