package config_test

import (
	"fmt"
	"path/filepath"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/config"
	"github.com/sluice-go/sluice/identity"
)

// Load a gateway's configuration file, put its rules in a registry and
// build its caller identity. (A running program would also keep the
// registry in step with the file with config.Watch, and hand the registry
// and the Identifier to httplimit.New.)
func ExampleLoad() {
	cfg, err := config.Load(filepath.Join("..", "testdata", "gateway.yaml"))
	if err != nil {
		fmt.Println(err) // names the file, the line and the key at fault
		return
	}
	rs, err := cfg.Ruleset()
	if err != nil {
		panic(err)
	}
	reg := sluice.NewRegistry(rs)
	if _, err := identity.New(cfg.Identity); err != nil {
		panic(err)
	}
	fmt.Println("store:", cfg.Store.Backend, cfg.Store.Dir, cfg.Store.Durability)
	fmt.Println("trusted proxies:", len(cfg.Identity.TrustedProxies), "forwarding header:", cfg.Identity.ForwardingHeader)
	for _, c := range rs.Rules() {
		r := c.Rule()
		fmt.Printf("rule %s: %s %s per %s, %d per %v\n", r.Name, r.Method, r.PathPrefix, r.Scope, r.Limit, r.Window)
	}
	fmt.Println("POST /api/orders/42 →", reg.Ruleset().AppendMatch(nil, sluice.RequestShape{Method: "POST", Path: "/api/orders/42"})[0].Name())
	fmt.Println("GET /healthz →", reg.Ruleset().AppendMatch(nil, sluice.RequestShape{Method: "GET", Path: "/healthz"})[0].Name())

	_, err = config.Parse("gateway.yaml", []byte("rules:\n  - name: a\n    window: 1 minute\n"))
	fmt.Println(err)
	// Output:
	// store: pebble ../var/sluice interval
	// trusted proxies: 0 forwarding header: x-forwarded-for
	// rule orders-write: POST /api/orders per user, 5 per 1m0s
	// rule search: GET /api/search per user, 10 per 1m0s
	// POST /api/orders/42 → orders-write
	// GET /healthz → catch-all
	// gateway.yaml:3: rules[0].window: want a duration such as 1m or 500ms, got "1 minute"
}
