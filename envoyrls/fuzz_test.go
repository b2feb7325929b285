package envoyrls_test

import (
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/envoyrls/rlsfile"
)

// FuzzMatch: descriptors decoded from arbitrary bytes match a limit only
// where the tree says: the limit's path has as many levels as the
// descriptor has entries, each level's key is the entry's key, and a level
// with a plain value names the entry's value. The key is a pure function
// of the entries.
func FuzzMatch(f *testing.F) {
	d, err := rlsfile.ParseFile("rl.yaml", []byte(fuzzConfig))
	if err != nil {
		f.Fatal(err)
	}
	c, err := envoyrls.NewConfig(d)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("foo\x00x\x00bar\x00bkthomps")
	f.Add("source_cluster\x00proxy\x00destination_cluster\x00mock")
	f.Add("files\x00files/a.pdf")
	f.Add("route\x00/api/v1/resource/1/action")
	f.Add("k\x00")
	f.Fuzz(func(t *testing.T, s string) {
		fields := strings.Split(s, "\x00")
		var es []*rlv3.RateLimitDescriptor_Entry
		for i := 0; i+1 < len(fields); i += 2 {
			es = append(es, &rlv3.RateLimitDescriptor_Entry{Key: fields[i], Value: fields[i+1]})
		}
		m := c.Match("rl", es)
		if m2 := c.Match("rl", es); m2 != m {
			t.Fatalf("two matches of one descriptor differ: %+v, %+v", m, m2)
		}
		if m.Limit == nil {
			return
		}
		levels := strings.Split(strings.TrimPrefix(m.Limit.Path, "rl."), ".")
		if len(levels) != len(es) {
			t.Fatalf("limit %s (%d levels) for %d entries", m.Limit.Path, len(levels), len(es))
		}
		for i, lv := range levels {
			k, v, hasValue := strings.Cut(lv, "_")
			if k != es[i].Key {
				t.Fatalf("level %d of %s is key %q, the entry's is %q", i, m.Limit.Path, k, es[i].Key)
			}
			if hasValue && !strings.Contains(v, "*") && v != es[i].Value {
				t.Fatalf("level %d of %s wants value %q, the entry has %q", i, m.Limit.Path, v, es[i].Value)
			}
			if hasValue && strings.Contains(v, "*") && !envoyrls.WildcardMatch(splitStar(v), es[i].Value) {
				t.Fatalf("level %d of %s: pattern %q does not match %q", i, m.Limit.Path, v, es[i].Value)
			}
		}
		if !m.Limit.Unlimited && m.Key == "" {
			t.Fatal("a limited match without a key")
		}
	})
}

// fuzzConfig has no underscores in keys or values, so a path splits back
// into its levels.
const fuzzConfig = `domain: rl
descriptors:
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - key: bar
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: bar
        value: bkthomps
        rate_limit: {unit: minute, requests_per_unit: 1}
      - key: bay
        rate_limit: {unlimited: true}
  - key: source
    value: proxy
    descriptors:
      - key: destination
        value: mock
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: route
    value: /api/*/resource/*/action
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
`
