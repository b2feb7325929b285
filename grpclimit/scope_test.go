package grpclimit

import (
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/identity"
)

// A rule scoped header:X-Org-ID counts each organisation apart when the
// call comes from a trusted proxy (the tests' loopback), and counts the
// peer's address when it does not, the metadata ignored.
func TestHeaderScopeFromMetadata(t *testing.T) {
	org := sluice.Rule{Name: "org", PathPrefix: "/grpc.health.v1.", Scope: sluice.ScopeHeader("X-Org-ID"), Algorithm: "fixed_window", Limit: 1, Window: time.Minute}
	for _, tt := range []struct {
		trusted string
		second  codes.Code // another organisation's first call
	}{
		{"127.0.0.1/32", codes.OK},
		{"10.0.0.0/8", codes.ResourceExhausted},
	} {
		s := newServer(t, []sluice.Rule{org}, serverOpts{idCfg: identity.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix(tt.trusted)}}})
		if _, err := s.check(t, "x-org-id", "acme"); err != nil {
			t.Fatalf("trusted %s: acme's first: %v", tt.trusted, err)
		}
		if _, err := s.check(t, "x-org-id", "globex"); status.Code(err) != tt.second {
			t.Errorf("trusted %s: globex's first: %v, want %v", tt.trusted, err, tt.second)
		}
		if _, err := s.check(t, "x-org-id", "acme"); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("trusted %s: acme's second: %v, want ResourceExhausted", tt.trusted, err)
		}
	}
}
