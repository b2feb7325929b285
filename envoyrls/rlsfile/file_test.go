package rlsfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/envoyrls"
)

// Each bad file is refused with an error naming the file, the line and the
// field.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"empty", "", "f.yaml: domain: required"},
		{"no domain", "descriptors: []\n", "f.yaml:1: domain: required"},
		{"unknown key", "domain: d\ndescriptors:\n  - key: k\n    rate_limt:\n      unit: second\n", "f.yaml:4: descriptors[0].rate_limt: unknown key"},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n", "f.yaml:3: descriptors[0].key: required"},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", `f.yaml:5: descriptors[1]: duplicate descriptor composite key "d.k_v"`},
		{"duplicate pattern", "domain: d\ndescriptors:\n  - key: k\n    value: v*\n  - key: k\n    value: v*\n", `f.yaml:5: descriptors[1]: duplicate descriptor composite key "d.k_v*"`},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", `f.yaml:5: descriptors[0].rate_limit.unit: invalid rate limit unit "fortnight"`},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n", `f.yaml:5: descriptors[0].rate_limit.unit: required`},
		{"no requests", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n", `f.yaml:5: descriptors[0].rate_limit.requests_per_unit: required`},
		{"negative", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n", `f.yaml:6: descriptors[0].rate_limit.requests_per_unit: want an integer from 0 to 1000000000, got the integer -1`},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n", "f.yaml:6: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited"},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: a\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: a\n", "f.yaml:9: descriptors[0].rate_limit.replaces[0].name: replaces should not contain name of same descriptor"},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: \"\"\n", "f.yaml:8: descriptors[0].rate_limit.replaces[0].name: should not have an empty replaces entry"},
		{"share without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", "f.yaml:3: descriptors[0].share_threshold: share_threshold can only be used with wildcard values"},
		{"bad bool", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: yes please\n", `f.yaml:4: descriptors[0].shadow_mode: want true or false, got "yes please"`},
		{"nested error", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: hour, requests_per_unit: x}\n", `f.yaml:6: descriptors[0].descriptors[0].rate_limit.requests_per_unit: want an integer`},
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: magic\n", `f.yaml:7: descriptors[0].rate_limit.algorithm: must be one of`},
		{"concurrency", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: concurrency\n", `f.yaml:7: descriptors[0].rate_limit.algorithm: must be one of`},
		{"burst on a window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      burst: 5\n", `f.yaml:7: descriptors[0].rate_limit.burst:`},
		{"multiplier 0", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      unit_multiplier: 0\n", `f.yaml:7: descriptors[0].rate_limit.unit_multiplier: must be at least 1`},
		{"window too long", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: year\n      requests_per_unit: 1\n      unit_multiplier: 11\n", `f.yaml:7: descriptors[0].rate_limit.unit_multiplier: a window of 11 years`},
		{"too many", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 4000000000\n", `f.yaml:6: descriptors[0].rate_limit.requests_per_unit: want an integer from 0 to 1000000000, got the integer 4000000000`},
		{"not a list", "domain: d\ndescriptors: {key: k}\n", "f.yaml:2: descriptors: want a list of descriptors, got a mapping"},
		{"a list of strings", "domain: d\ndescriptors: [k]\n", "f.yaml:2: descriptors[0]: config error, yaml file contains list of type other than map"},
		{"given twice", "domain: d\ndomain: e\n", "f.yaml:2: domain: given twice"},
		{"syntax", "domain: d\ndescriptors:\n  - key: k\n   value: v\n", "f.yaml:4:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseFile("f.yaml", []byte(tt.yaml))
			if err == nil {
				t.Fatalf("parsed, want an error containing %q", tt.want)
			}
			if !strings.HasPrefix(err.Error(), tt.want) && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to start with %q", err, tt.want)
			}
			var ce *config.Error
			if !errors.As(err, &ce) || !errors.Is(err, sluice.ErrInvalidConfig) {
				t.Errorf("error %T does not match *config.Error and sluice.ErrInvalidConfig", err)
			}
		})
	}
}

// Every field of the format is read: units, multiplier, Sluice's
// algorithm and burst, the flags; metadata is accepted; aliases resolve.
func TestParseFields(t *testing.T) {
	const fields = `---
domain: d
limits:
descriptors:
  - key: a
    value: 2061234567
    shadow_mode: true
    quota_mode: true
    detailed_metric: true
    metadata: {team: {name: x}}
    rate_limit: &ten
      name: ten
      unit: MINUTE
      requests_per_unit: 10
      unit_multiplier: 5
  - key: b
    rate_limit: *ten
  - key: c
    rate_limit:
      <<: *ten
      name: c
      unit: week
      algorithm: gcra
      burst: 20
`
	if _, err := ParseFile("f.yaml", []byte(fields)); err == nil || !strings.Contains(err.Error(), "f.yaml:3: limits: unknown key") {
		t.Fatalf("a file with the unknown key limits: %v", err)
	}
	d, err := ParseFile("f.yaml", []byte(strings.Replace(fields, "limits:\n", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	ls := d.Limits()
	if len(ls) != 3 {
		t.Fatalf("%d limits, want 3", len(ls))
	}
	a, b, c := ls[0], ls[1], ls[2]
	if a.Path != "d.a_2061234567" || a.Window != 5*time.Minute || !a.Shadow || !a.Quota || !a.DetailedMetric || a.Algorithm != "fixed_window" || a.Name != "ten" {
		t.Errorf("a: %+v", a)
	}
	if b.Path != "d.b" || b.RequestsPerUnit != 10 || b.Window != 5*time.Minute || b.Shadow {
		t.Errorf("b (an alias of a's rate_limit): %+v", b)
	}
	if c.Name != "c" || c.Window != 5*7*24*time.Hour || c.Algorithm != "gcra" || c.Burst != 20 || c.RequestsPerUnit != 10 || c.Capacity() != 20 {
		t.Errorf("c (merged from a's): %+v", c)
	}
}

// Load reads a directory's YAML files, one domain each, its
// subdirectories' too, skipping hidden files and directories and others; two files of one domain are refused, naming both.
func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\n")
	write("b.yml", "domain: b\n")
	write(".hidden.yaml", "not: [valid")
	write("notes.txt", "ignored")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Domains(), ","); got != "a,b" {
		t.Errorf("domains %s, want a,b", got)
	}
	// Subdirectories are read too, as envoyproxy/ratelimit walks its
	// runtime directory; hidden ones (a ConfigMap's ..data) are not.
	for _, d := range []string{"team", filepath.Join("team", "deep"), "..data"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join("team", "c.yaml"), "domain: c\n")
	write(filepath.Join("team", "deep", "d.yaml"), "domain: d\n")
	write(filepath.Join("..data", "e.yaml"), "domain: e\n")
	if cfg, err = Load(dir); err != nil || strings.Join(cfg.Domains(), ",") != "a,b,c,d" {
		t.Errorf("with subdirectories: domains %v, %v; want a,b,c,d", cfg.Domains(), err)
	}
	write("c.yaml", "domain: a\n")
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `duplicate domain "a"`) || !strings.Contains(err.Error(), "a.yaml") {
		t.Errorf("a duplicate domain: %v", err)
	}
	if _, err := Load(t.TempDir()); !errors.Is(err, ErrNoConfig) {
		t.Errorf("an empty directory: %v, want ErrNoConfig", err)
	}
}

// MERGE_DOMAIN_CONFIG: the files of one domain read as one, their
// top-level descriptors together; one both have is refused, naming both
// files, as envoyproxy/ratelimit refuses a duplicate composite key.
// Without it, two files of one domain are refused.
func TestLoadMergingDomains(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 5}\n")
	write("b.yaml", "domain: d\ndescriptors:\n  - key: ip\n    rate_limit: {unit: day, requests_per_unit: 7}\n  - key: path\n    value: \"/api/*\"\n    rate_limit: {unit: day, requests_per_unit: 9}\n")
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `duplicate domain "d"`) {
		t.Errorf("without merging: %v, want the duplicate refused", err)
	}
	cfg, err := LoadWith(dir, envoyrls.LoadOptions{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		entries []string
		rpu     uint32
	}{{[]string{"user", "u1"}, 5}, {[]string{"ip", "10.0.0.1"}, 7}, {[]string{"path", "/api/x"}, 9}} {
		m := cfg.Match("d", desc(c.entries...).GetEntries())
		if m.Limit == nil || m.Limit.RequestsPerUnit != c.rpu {
			t.Errorf("merged domain, %v: %+v, want the limit of %d", c.entries, m.Limit, c.rpu)
		}
	}
	if n := len(cfg.Domain("d").Limits()); n != 3 {
		t.Errorf("merged domain has %d limits, want 3", n)
	}
	write("c.yaml", "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	if _, err := LoadWith(dir, envoyrls.LoadOptions{MergeDomains: true}); err == nil || !strings.Contains(err.Error(), "duplicate descriptor user=") || !strings.Contains(err.Error(), "a.yaml") {
		t.Errorf("a descriptor in two merged files: %v, want it refused naming both", err)
	}
}

// desc builds a descriptor from key, value pairs.
func desc(kv ...string) *rlv3.RateLimitDescriptor {
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}
