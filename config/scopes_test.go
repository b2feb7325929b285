package config_test

import (
	"strings"
	"testing"

	"github.com/sluice-go/sluice/config"
)

// The fields of scopes, path patterns, groups and counters are checked,
// each error naming the file's line, the field and the rule.
func TestScopeFieldsNameTheLineAndTheField(t *testing.T) {
	const head = "rules:\n"
	for _, tt := range []struct {
		name, rules, want string
	}{
		{"bad header name", `  - {name: a, path_prefix: /, scope: "header:X Org", algorithm: fixed_window, limit: 1, window: 1m}`,
			`cfg.yaml:2: rules[0].scope: rule "a": header: want a header name`},
		{"param not in the pattern", `  - {name: a, path: "/v1/orgs/{org}", scope: "param:team", algorithm: fixed_window, limit: 1, window: 1m}`,
			`cfg.yaml:2: rules[0].scope: rule "a": param:team names no parameter of the rule's path: its path "/v1/orgs/{org}" has [org]`},
		{"param without a pattern", `  - {name: a, path_prefix: /v1/, scope: "param:org", algorithm: fixed_window, limit: 1, window: 1m}`,
			`cfg.yaml:2: rules[0].scope: rule "a": param:org names no parameter of the rule's path: it has no path pattern`},
		{"bad pattern", `  - {name: a, path: "/v1/{org", scope: user, algorithm: fixed_window, limit: 1, window: 1m}`,
			`cfg.yaml:2: rules[0].path: rule "a": a parameter is a whole segment`},
		{"prefix and pattern", `  - {name: a, path: "/v1/{org}", path_prefix: /v1/, scope: user, algorithm: fixed_window, limit: 1, window: 1m}`,
			`cfg.yaml:2: rules[0].path: rule "a": a rule has a path_prefix or a path pattern, not both`},
		{"neither prefix nor pattern", `  - {name: a, scope: user, algorithm: fixed_window, limit: 1, window: 1m}`,
			`cfg.yaml:2: rules[0].path_prefix: rule "a": required (or path, a pattern such as /v1/orgs/{org}/orders)`},
		{"group levels out of order", "  - {name: u, group: g, path_prefix: /, scope: user, algorithm: fixed_window, limit: 1, window: 1m}\n" +
			`  - {name: o, group: g, path_prefix: /, scope: "attr:org", algorithm: fixed_window, limit: 1, window: 1m}`,
			`cfg.yaml:3: rules[1].scope: rule "o": rule "u" of group "g", scoped user, is a narrower level than this one`},
		{"group of user and api_key", "  - {name: u, group: g, path_prefix: /, scope: user, algorithm: fixed_window, limit: 1, window: 1m}\n" +
			`  - {name: k, group: g, path_prefix: /, scope: api_key, algorithm: fixed_window, limit: 1, window: 1m}`,
			`cfg.yaml:3: rules[1].scope: rule "k": rule "u" of group "g" is scoped user and this one api_key: neither holds the other`},
		{"empty group", `  - {name: a, group: "", path_prefix: /, scope: user, algorithm: fixed_window, limit: 1, window: 1m}`,
			`cfg.yaml:2: rules[0].group: must not be empty`},
		{"counter of a bucket", "  - {name: a, plan: free, counter: c, path_prefix: /, scope: user, algorithm: token_bucket, limit: 1, window: 1m}\n" +
			`  - {name: b, plan: pro, counter: c, path_prefix: /, scope: user, algorithm: token_bucket, limit: 9, window: 1m}`,
			`cfg.yaml:3: rules[1].counter: rule "b": shares counter "c" with rule "a" under token_bucket`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("cfg.yaml", []byte(head+tt.rules+"\n"))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v\nwant %s", err, tt.want)
			}
		})
	}
	cfg, err := config.Parse("cfg.yaml", []byte(head+
		`  - {name: o, group: g, counter: org, path: "/v1/orgs/{org}/{rest...}", scope: "param:org", algorithm: fixed_window, limit: 9, window: 1m}`+"\n"+
		`  - {name: h, group: g, path_prefix: /v1/, scope: "header:x-team-id", algorithm: fixed_window, limit: 9, window: 1m}`+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Rules[0]; r.Group != "g" || r.Counter != "org" || r.Path != "/v1/orgs/{org}/{rest...}" {
		t.Fatalf("read %+v", r)
	}
}
