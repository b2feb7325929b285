package envoyrls_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/envoyrls"
)

func u32(n uint32) *uint32 { return &n }

// A domain built in Go is the one its file would give; what
// envoyproxy/ratelimit refuses is refused naming the field, with no line.
func TestNewDomain(t *testing.T) {
	d, err := envoyrls.NewDomain("go", "api", []envoyrls.Descriptor{
		{Key: "user", RateLimit: &envoyrls.RateLimit{Unit: "Minute", RequestsPerUnit: u32(60), UnitMultiplier: u32(2), Algorithm: "token_bucket", Burst: 5}},
		{Key: "path", Value: "/api/*", ShareThreshold: true, Descriptors: []envoyrls.Descriptor{
			{Key: "free", RateLimit: &envoyrls.RateLimit{Unlimited: true}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ls := d.Limits()
	if len(ls) != 2 || ls[0].Path != "api.user" || ls[0].Window != 2*time.Minute || ls[0].Capacity() != 5 || ls[1].Path != "api.path_/api/*.free" || !ls[1].Unlimited {
		t.Errorf("limits %+v", ls)
	}
	if d.Name != "api" || d.File != "go" {
		t.Errorf("domain %q from %q", d.Name, d.File)
	}
	for _, c := range []struct {
		descs      []envoyrls.Descriptor
		field, why string
	}{
		{[]envoyrls.Descriptor{{}}, "descriptors[0].key", "required: descriptor has empty key"},
		{[]envoyrls.Descriptor{{Key: "k", ShareThreshold: true}}, "descriptors[0].share_threshold", `share_threshold can only be used with wildcard values (containing '*'), but found key "k"`},
		{[]envoyrls.Descriptor{{Key: "k"}, {Key: "k"}}, "descriptors[1]", `duplicate descriptor composite key "api.k"`},
		{[]envoyrls.Descriptor{{Key: "k", RateLimit: &envoyrls.RateLimit{Unit: "day"}}}, "descriptors[0].rate_limit.requests_per_unit", "required"},
		{[]envoyrls.Descriptor{{Key: "k", RateLimit: &envoyrls.RateLimit{RequestsPerUnit: u32(1)}}}, "descriptors[0].rate_limit.unit", "required: want one of second, minute, hour, day, week, month, year"},
		{[]envoyrls.Descriptor{{Key: "k", RateLimit: &envoyrls.RateLimit{Unit: "day", RequestsPerUnit: u32(1), UnitMultiplier: u32(0)}}}, "descriptors[0].rate_limit.unit_multiplier", "must be at least 1"},
		{[]envoyrls.Descriptor{{Key: "k", Descriptors: []envoyrls.Descriptor{{Key: "j", RateLimit: &envoyrls.RateLimit{Unit: "day", RequestsPerUnit: u32(1), Replaces: []string{""}}}}}},
			"descriptors[0].descriptors[0].rate_limit.replaces[0].name", "should not have an empty replaces entry"},
		{[]envoyrls.Descriptor{{Key: "k", RateLimit: &envoyrls.RateLimit{Unit: "day", RequestsPerUnit: u32(1), Burst: 3}}}, "descriptors[0].rate_limit.burst", "fixed_window does not take a burst (only token_bucket, leaky_bucket and gcra do)"},
		{[]envoyrls.Descriptor{{Key: "k", RateLimit: &envoyrls.RateLimit{Unit: "day", RequestsPerUnit: u32(2e9)}}}, "descriptors[0].rate_limit.requests_per_unit", "must be at most 1000000000, got 2000000000"},
	} {
		_, err := envoyrls.NewDomain("go", "api", c.descs)
		var ce *config.Error
		if !errors.As(err, &ce) || !errors.Is(err, sluice.ErrInvalidConfig) || ce.File != "go" || ce.Line != 0 || ce.Field != c.field || ce.Reason != c.why {
			t.Errorf("%+v: %v, want a *config.Error on go's %s with no line: %s", c.descs, err, c.field, c.why)
		}
	}
	if _, err := envoyrls.NewDomain("go", "", nil); err == nil || err.Error() != "go: domain: required: a domain cannot be empty" {
		t.Errorf("no name: %v", err)
	}
}
