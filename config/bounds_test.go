package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
)

// An error about a huge value in the file quotes a few hundred bytes of
// it, marked with its length, wherever the value is: a 1 MiB line never
// comes back as a 1 MiB message.
func TestErrorsQuoteAFewHundredBytes(t *testing.T) {
	big := strings.Repeat("a", hugeValue())
	rule := func(field, value string) string {
		r := map[string]string{"name": "x", "path_prefix": "/", "scope": "user", "algorithm": "gcra", "limit": "1", "window": "1m"}
		r[field] = value
		var b strings.Builder
		b.WriteString("rules:\n  -")
		for _, k := range []string{"name", "path_prefix", "scope", "algorithm", "limit", "window"} {
			b.WriteString(" " + k + ": " + r[k] + "\n   ")
		}
		return b.String() + "\n"
	}
	for _, c := range []struct{ name, file, field string }{
		{"rule name", rule("name", "x") + "  - {name: " + big + "}\n", "rules[1]"},
		{"window", rule("window", big), "rules[0].window"},
		{"limit", rule("limit", big), "rules[0].limit"},
		{"integer", rule("limit", "1"+strings.Repeat("0", len(big))), "rules[0].limit"},
		{"scope", rule("scope", big), "rules[0].scope"},
		{"algorithm", rule("algorithm", big), "rules[0].algorithm"},
		{"method", rule("name", "x\n    method: "+big), "rules[0].method"},
		{"path_prefix", rule("path_prefix", big), "rules[0].path_prefix"},
		{"unknown key", "rules:\n  - ? " + big + "\n    : 1\n", "rules[0]." + big[:100]},
		{"user_header", "identity:\n  user_header: \"" + big + " \"\n", "identity.user_header"},
		{"trusted proxy", "identity:\n  trusted_proxies: [" + big + "]\n", "identity.trusted_proxies[0]"},
		{"forwarding_header", "identity:\n  forwarding_header: " + big + "\n", "identity.forwarding_header"},
		{"redis addrs", "store:\n  backend: redis\n  redis:\n    addrs: " + big + "\n", "store.redis.addrs"},
		{"redis addr", "store:\n  backend: redis\n  redis:\n    addrs: [" + big + "]\n", "store.redis.addrs[0]"},
		{"on_store_error", "on_store_error: " + big + "\n", "on_store_error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := config.Parse("big.yaml", []byte(c.file))
			if err == nil {
				t.Fatal("parsed")
			}
			var ce *config.Error
			if !errors.As(err, &ce) || !errors.Is(err, sluice.ErrInvalidConfig) {
				t.Fatalf("error %T %.300q, want a *config.Error", err, err)
			}
			msg := err.Error()
			if len(msg) > 600 {
				t.Fatalf("message of %d bytes, want at most 600: %.600q", len(msg), msg)
			}
			if !strings.HasPrefix(msg, "big.yaml:") || !strings.Contains(msg, c.field) || !strings.Contains(msg, " bytes)") {
				t.Errorf("message %q: want the file, %q and the length of what it cut", msg, c.field)
			}
		})
	}
}

// hugeValue is the length of the values TestErrorsQuoteAFewHundredBytes
// writes: 1 MiB, or 64 KiB under the race detector, where the parser's
// every byte is checked and the 15 files of 1 MiB took 12 s (64 KiB is
// still a hundred times the 600 bytes a message may hold, and no bound
// of the parser lies between the two); make full parses the 1 MiB ones
// in a normal build.
func hugeValue() int {
	if raceEnabled {
		return 64 << 10
	}
	return 1 << 20
}
