package rlsfile

import (
	"strings"
	"testing"
)

// An error about a huge value in an envoyproxy/ratelimit file quotes a few
// hundred bytes of it, wherever the reason was written: a 1 MiB line never
// comes back as a 1 MiB message.
func TestErrorsQuoteAFewHundredBytes(t *testing.T) {
	big := strings.Repeat("a", 1<<20)
	limit := "\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	for _, c := range []struct{ name, doc, want string }{
		{"unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: " + big + ", requests_per_unit: 1}\n", "descriptors[0].rate_limit.unit"},
		{"requests_per_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + big + "}\n", "descriptors[0].rate_limit.requests_per_unit"},
		{"duplicate key", "domain: d\ndescriptors:\n  - key: " + big + limit + "  - key: " + big + limit, "descriptors[1]: duplicate descriptor"},
		{"unknown key", "domain: d\ndescriptors:\n  - key: k\n    ? " + big + "\n    : 1\n", "descriptors[0].aaa"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseFile("x.yaml", []byte(c.doc))
			if err == nil {
				t.Fatal("parsed")
			}
			if msg := err.Error(); len(msg) > 700 || !strings.HasPrefix(msg, "x.yaml:") || !strings.Contains(msg, c.want) || !strings.Contains(msg, " bytes)") {
				t.Errorf("message of %d bytes %.300q: want at most 700 naming %q and the length cut", len(msg), msg, c.want)
			}
		})
	}
}
