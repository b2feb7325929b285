package httplimit

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/sluice-go/sluice"
)

// The identity section of a configuration file reaches the Identifier
// field for field.
func TestIdentifierConfigFrom(t *testing.T) {
	cfg, err := sluice.ParseConfig("x.yaml", []byte(`identity:
  user_header: X-Account
  api_key_header: X-Token
  trusted_proxies: [10.0.0.0/8, 127.0.0.1]
  ipv6_prefix: 48
  headers_from_trusted_proxies_only: true
rules: []
`))
	if err != nil {
		t.Fatal(err)
	}
	want := IdentifierConfig{
		UserHeader:                    "X-Account",
		APIKeyHeader:                  "X-Token",
		TrustedProxies:                []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32")},
		IPv6Prefix:                    48,
		HeadersFromTrustedProxiesOnly: true,
	}
	if got := IdentifierConfigFrom(cfg.Identity); !reflect.DeepEqual(got, want) {
		t.Errorf("IdentifierConfigFrom = %+v, want %+v", got, want)
	}
	if _, err := NewIdentifier(IdentifierConfigFrom(cfg.Identity)); err != nil {
		t.Errorf("NewIdentifier(IdentifierConfigFrom(...)) = %v", err)
	}
}
