package envoyrls_test

import (
	"context"
	"fmt"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-go/sluice/backend/memory"
	"github.com/sluice-go/sluice/engine"
	"github.com/sluice-go/sluice/envoyrls"
)

// A domain built in Go served in-process (package rlsfile reads the same
// from envoyproxy/ratelimit's YAML): two marketing messages a day to a
// number, decided with the number's own limit as one.
func ExampleServer() {
	perDay := func(n uint32) *envoyrls.RateLimit {
		return &envoyrls.RateLimit{Unit: "day", RequestsPerUnit: &n}
	}
	d, err := envoyrls.NewDomain("messaging", "messaging", []envoyrls.Descriptor{
		{Key: "message_type", Value: "marketing", Descriptors: []envoyrls.Descriptor{
			{Key: "to_number", RateLimit: perDay(2)},
		}},
		{Key: "to_number", RateLimit: perDay(100)},
	})
	if err != nil {
		panic(err)
	}
	cfg, _ := envoyrls.NewConfig(d)
	eng, _ := engine.New(memory.New(nil), nil)
	defer eng.Close()
	srv, _ := envoyrls.NewServer(cfg, envoyrls.Options{Engine: eng})

	entry := func(k, v string) *rlv3.RateLimitDescriptor_Entry {
		return &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	req := &rlspb.RateLimitRequest{Domain: "messaging", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{entry("message_type", "marketing"), entry("to_number", "2061111111")}},
		{Entries: []*rlv3.RateLimitDescriptor_Entry{entry("to_number", "2061111111")}},
	}}
	for i := 0; i < 3; i++ {
		resp, _ := srv.ShouldRateLimit(context.Background(), req)
		fmt.Println(resp.OverallCode, resp.Statuses[0].Code, resp.Statuses[1].LimitRemaining)
	}
	// Output:
	// OK OK 99
	// OK OK 98
	// OVER_LIMIT OVER_LIMIT 98
}
