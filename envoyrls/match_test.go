package envoyrls_test

import (
	"strings"
	"testing"

	"github.com/sluice-go/sluice/envoyrls"
	"github.com/sluice-go/sluice/envoyrls/rlsfile"
)

// The README's examples match as its text says.
func TestMatchReadmeExamples(t *testing.T) {
	cfgs := map[string]*envoyrls.Config{}
	for _, dir := range []string{"readme", "readme-2"} {
		c, err := rlsfile.Load("../cmd/sluice/testdata/rls/" + dir)
		if err != nil {
			t.Fatal(err)
		}
		cfgs[dir] = c
	}
	tests := []struct {
		cfg, domain string
		entries     []string
		path        string // "" for no limit
		metric      string
	}{
		{"readme", "mongo_cps", []string{"database", "users"}, "mongo_cps.database_users", "database_users"},
		{"readme", "mongo_cps", []string{"database", "other"}, "", ""},
		{"readme", "messaging", []string{"message_type", "marketing", "to_number", "2061111111"}, "messaging.message_type_marketing.to_number", "message_type_marketing.to_number"},
		{"readme", "messaging", []string{"to_number", "2061111111"}, "messaging.to_number", "to_number"},
		{"readme", "messaging", []string{"message_type", "marketing"}, "", ""}, // a placeholder without a limit
		{"readme", "messaging", []string{"message_type", "transactional", "to_number", "1"}, "", ""},
		// Example 3: key and value before the key alone.
		{"readme", "edge_proxy_per_ip", []string{"remote_address", "50.0.0.5"}, "edge_proxy_per_ip.remote_address_50.0.0.5", "remote_address_50.0.0.5"},
		{"readme", "edge_proxy_per_ip", []string{"remote_address", "50.0.0.1"}, "edge_proxy_per_ip.remote_address", "remote_address"},
		// Example 4: the depth must be the request's.
		{"readme", "example4", []string{"key", "value", "subkey", "subvalue"}, "", ""},
		{"readme-2", "example4", []string{"key", "value", "subkey", "subvalue"}, "example4.key_value.subkey", "key_value.subkey"},
		{"readme-2", "example4", []string{"key", "value"}, "", ""},
		{"readme", "internal", []string{"ldap", "x"}, "internal.ldap", "ldap"},
		{"readme", "example6", []string{"service", "auth-service", "user", "user-a"}, "example6.service.user_user-a", "service.user_user-a"},
		{"readme", "example6", []string{"service", "auth-service", "user", "user-c"}, "", ""},
		// Example 8: detailed_metric labels by the request's value.
		{"readme", "example8", []string{"key1", "unspecified_value"}, "example8.key1", "key1_unspecified_value"},
		{"readme", "example8", []string{"key1", "value1"}, "example8.key1_value1", "key1_value1"},
		// Example 9: patterns.
		{"readme", "example9", []string{"key1", "value1"}, "example9.key1_value*", "key1_value*"},
		{"readme", "example9", []string{"key1", "valueXYZ"}, "example9.key1_value*", "key1_value*"},
		{"readme", "example9", []string{"key1", "valu"}, "", ""},
		// Example 10: value_to_metric.
		{"readme", "example10", []string{"route", "api", "http_method", "GET", "subject_id", "123"}, "example10.route.http_method.subject_id", "route_api.http_method_GET.subject_id"},
		{"readme", "example10_wildcard", []string{"user", "alice", "action", "readfile", "resource", "documents"}, "example10_wildcard.user.action_read*.resource", "user_alice.action_readfile.resource"},
		{"readme", "example11", []string{"files", "files/a.pdf"}, "example11.files_files/*", "files_files/*"},
	}
	for _, tt := range tests {
		var es []string
		es = append(es, tt.entries...)
		m := cfgs[tt.cfg].Match(tt.domain, desc(es...).Entries)
		path := ""
		if m.Limit != nil {
			path = m.Limit.Path
		}
		if path != tt.path || m.Metric != tt.metric {
			t.Errorf("%s %s %v: limit %q metric %q, want %q %q", tt.cfg, tt.domain, tt.entries, path, m.Metric, tt.path, tt.metric)
		}
	}
}

// share_threshold: every value matching the pattern spends one budget;
// without it each value has its own.
func TestMatchShareThreshold(t *testing.T) {
	c, err := rlsfile.Load("../cmd/sluice/testdata/rls/readme/example11-1.yaml")
	if err != nil {
		t.Fatal(err)
	}
	key := func(k, v string) string { return c.Match("example11", desc(k, v).Entries).Key }
	if a, b := key("files", "files/a.pdf"), key("files", "files/b.csv"); a != b || a == "" {
		t.Errorf("shared: keys %q and %q, want one", a, b)
	}
	if a, b := key("files_no_share", "files_no_share/a.pdf"), key("files_no_share", "files_no_share/b.csv"); a == b {
		t.Errorf("not shared: both keys %q", a)
	}
}

// Keys never collide: entries are length-prefixed.
func TestMatchKeysDistinct(t *testing.T) {
	c, err := envoyrls.NewConfig(mustParse(t, "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: hour, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	k1 := c.Match("d", desc("a", "x:1", "b", "y").Entries).Key
	k2 := c.Match("d", desc("a", "x", "b", "1:y").Entries).Key
	if k1 == k2 || k1 == "" {
		t.Errorf("keys %q and %q", k1, k2)
	}
}

func mustParse(t *testing.T, s string) *envoyrls.Domain {
	t.Helper()
	d, err := rlsfile.ParseFile("t.yaml", []byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func splitStar(p string) []string { return strings.Split(p, "*") }

func TestWildcardMatch(t *testing.T) {
	tests := []struct {
		pattern, value string
		want           bool
	}{
		{"a*", "a", true}, {"a*", "abc", true}, {"a*", "ba", false},
		{"*", "", true}, {"*b", "ab", true}, {"*b", "ba", false},
		{"a*a", "a", false}, {"a*a", "aa", true}, {"a*b*c", "abc", true}, {"a*b*c", "acb", false},
		{"a**b", "ab", true}, {"ab*ba", "aba", false},
	}
	for _, tt := range tests {
		if got := envoyrls.WildcardMatch(splitStar(tt.pattern), tt.value); got != tt.want {
			t.Errorf("envoyrls.WildcardMatch(%q, %q) = %v, want %v", tt.pattern, tt.value, got, tt.want)
		}
	}
}
