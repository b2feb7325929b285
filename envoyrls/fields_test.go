package envoyrls_test

import (
	"testing"

	"github.com/sluice-go/sluice/envoyrls"
)

// A limit's name is a structured field string in the headers, as every
// door writes one (package internal/ratefield): in quotes, '"' and '\'
// escaped, and a byte a string may not hold (a control, non-ASCII) as
// '?', the character the other doors write (this server wrote '_' before
// they shared one function).
func TestHeadersQuoteTheName(t *testing.T) {
	f := newFixture(t, envoyrls.Options{}, `domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: "caf\u00e9 \"x\\y\"\t"}
`)
	r := f.ask(t, "api", 0, desc("user", "alice"))
	headers := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		headers[h.Key] = h.Value
	}
	for k, v := range map[string]string{
		"RateLimit-Policy": `"caf?? \"x\\y\"?";q=2;w=60`,
		"RateLimit":        `"caf?? \"x\\y\"?";r=1;t=60`,
	} {
		if headers[k] != v {
			t.Errorf("header %s = %s, want %s (all: %v)", k, headers[k], v, headers)
		}
	}
}
