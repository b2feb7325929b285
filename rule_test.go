package sluice_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

// ordersWrite is a valid rule the validation cases break one field at a time.
func ordersWrite() sluice.Rule {
	return sluice.Rule{
		Name: "orders-write", Method: "POST", PathPrefix: "/api/orders", Scope: sluice.ScopeUser,
		Algorithm: algo.TokenBucketName, Limit: 5, Window: time.Minute,
	}
}

func TestValidRulesPass(t *testing.T) {
	for _, r := range []sluice.Rule{
		ordersWrite(),
		{Name: "any", PathPrefix: "/", Scope: sluice.ScopeGlobal, Algorithm: algo.GCRAName, Limit: 1, Window: time.Second},
		{Name: "burst", Method: "*", PathPrefix: "/x", Scope: sluice.ScopeIP, Algorithm: algo.LeakyBucketName, Limit: 60, Window: time.Minute, Burst: 10, Cost: 10},
		{Name: "key", Method: "GET", PathPrefix: "/k", Scope: sluice.ScopeAPIKey, Algorithm: algo.SlidingLogName, Limit: 3, Window: time.Hour},
	} {
		if err := r.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v, want nil", r.Name, err)
		}
	}
}

func TestValidateNamesTheRuleAndTheField(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*sluice.Rule)
		field  string
		target error // also matched with errors.Is, besides ErrInvalidRule
	}{
		{"no name", func(r *sluice.Rule) { r.Name = "" }, "name", nil},
		{"lower-case method", func(r *sluice.Rule) { r.Method = "post" }, "method", nil},
		{"method with a space", func(r *sluice.Rule) { r.Method = "PO ST" }, "method", nil},
		{"no path prefix", func(r *sluice.Rule) { r.PathPrefix = "" }, "path_prefix", nil},
		{"relative path prefix", func(r *sluice.Rule) { r.PathPrefix = "api/orders" }, "path_prefix", nil},
		{"no scope", func(r *sluice.Rule) { r.Scope = "" }, "scope", nil},
		{"unknown scope", func(r *sluice.Rule) { r.Scope = "tenant" }, "scope", nil},
		{"unknown algorithm", func(r *sluice.Rule) { r.Algorithm = "token-bucket" }, "algorithm", algo.ErrUnknownAlgorithm},
		{"zero limit", func(r *sluice.Rule) { r.Limit = 0 }, "limit", algo.ErrInvalidParams},
		{"negative limit", func(r *sluice.Rule) { r.Limit = -1 }, "limit", algo.ErrInvalidParams},
		{"zero window", func(r *sluice.Rule) { r.Window = 0 }, "window", algo.ErrInvalidParams},
		{"negative burst", func(r *sluice.Rule) { r.Burst = -2 }, "burst", algo.ErrInvalidParams},
		{"burst on a window algorithm", func(r *sluice.Rule) { r.Algorithm, r.Burst = algo.FixedWindowName, 3 }, "burst", algo.ErrInvalidParams},
		{"negative cost", func(r *sluice.Rule) { r.Cost = -1 }, "cost", algo.ErrInvalidCost},
		{"cost above the capacity", func(r *sluice.Rule) { r.Cost = 6 }, "cost", algo.ErrCostExceedsCapacity},
		{"cost above the burst", func(r *sluice.Rule) { r.Limit, r.Burst, r.Cost = 100, 2, 3 }, "cost", algo.ErrCostExceedsCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := ordersWrite()
			tt.edit(&r)
			err := r.Validate()
			if err == nil {
				t.Fatal("Validate() = nil, want an error")
			}
			var re *sluice.RuleError
			if !errors.As(err, &re) {
				t.Fatalf("Validate() = %T %v, want a *RuleError", err, err)
			}
			if got, want := re.Field, tt.field; got != want {
				t.Errorf("Field = %q, want %q (%v)", got, want, err)
			}
			if got, want := re.Rule, r.Name; got != want {
				t.Errorf("Rule = %q, want %q", got, want)
			}
			if want := `rule "` + r.Name + `": ` + tt.field + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Error() = %q, want it to start with %q", err, want)
			}
			if !errors.Is(err, sluice.ErrInvalidRule) {
				t.Errorf("errors.Is(%v, ErrInvalidRule) = false", err)
			}
			if tt.target != nil && !errors.Is(err, tt.target) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.target)
			}
		})
	}
}

func TestValidateWrapsAlgoParamError(t *testing.T) {
	r := ordersWrite()
	r.Name, r.Window = "orders-write", 0
	err := r.Validate()
	if got, want := err.Error(), `rule "orders-write": window: must be positive, got 0s`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var pe *algo.ParamError
	if !errors.As(err, &pe) || pe.Field != "window" {
		t.Errorf("errors.As(%v, *algo.ParamError) = %v, %+v; want the window's ParamError", err, pe != nil, pe)
	}
}
