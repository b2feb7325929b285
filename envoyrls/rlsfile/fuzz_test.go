package rlsfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluice-go/sluice/envoyrls"
)

// FuzzParseFile: any bytes parse or fail with an error, never panic; a
// file that parses matches any descriptor without panicking.
func FuzzParseFile(f *testing.F) {
	for _, s := range []string{seedMessaging, seedExample6, seedExample7, seedInternal, seedQuota,
		"domain: d\ndescriptors:\n  - key: k\n    value: a*b*\n    share_threshold: true\n    rate_limit: &x {unit: day, requests_per_unit: 3, algorithm: gcra, burst: 4}\n  - key: j\n    rate_limit:\n      <<: *x\n",
		"domain: [", "domain: d\ndescriptors: [[[]]]\n", "domain: d\nallow_empty: true\n",
		"domain: d\nallow_empty: true\ndescriptors:\n  - {key: k, rate_limit: {unlimited: true}}\n  - {key: j, shadow_mode: true, rate_limit: {unit: day, requests_per_unit: 1}}\n"} {
		f.Add([]byte(s))
	}
	// The README's files, and envoyproxy/ratelimit's own examples.
	seeds, _ := filepath.Glob(filepath.Join("..", "..", "cmd", "sluice", "testdata", "rls", "*", "*.yaml"))
	for _, name := range seeds {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, allowEmpty, err := parseFile("f.yaml", data)
		if allowEmpty && enforcing(d) != nil {
			t.Fatalf("allow_empty: true parsed on a file that limits (%s)", enforcing(d).Path)
		}
		if err != nil {
			if d != nil {
				t.Fatal("a domain with an error")
			}
			return
		}
		c, err := envoyrls.NewConfig(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range d.Limits() {
			if !l.Unlimited && l.RequestsPerUnit > 0 && l.EngineLimit().Algorithm == nil {
				t.Fatalf("limit %s has no algorithm", l.Path)
			}
			c.Match(d.Name, entriesOf(l.Path))
		}
	})
}

// entriesOf turns "d.a_x.b" into the entries (a, x), (b, "").
func entriesOf(path string) []*rlv3.RateLimitDescriptor_Entry {
	var es []*rlv3.RateLimitDescriptor_Entry
	parts := strings.Split(path, ".")
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "_")
		es = append(es, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return es
}

// The seeds: the files package envoyrls serves in its tests.
const (
	seedMessaging = `domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`
	seedExample6 = `domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`
	seedInternal = `domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`
	seedExample7 = `domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: hour
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: hour
`
	seedQuota = `domain: rl
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: service
    value: service_2
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
`
)
