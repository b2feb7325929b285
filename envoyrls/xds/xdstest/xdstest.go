// Package xdstest runs go-control-plane's own xDS server on a loopback
// port for tests: an aggregated discovery service over a snapshot cache,
// as envoyproxy/ratelimit's integration tests run it, serving
// RateLimitConfig resources to one node.
package xdstest

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	confv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// ControlPlane is a running xDS server. Its methods are safe for
// concurrent use.
type ControlPlane struct {
	t     testing.TB
	node  string
	cache cachev3.SnapshotCache
	addr  string

	mu       sync.Mutex
	gs       *grpc.Server
	cancel   context.CancelFunc
	requests []*discoveryv3.DiscoveryRequest
	headers  []metadata.MD
	changed  chan struct{} // closed and replaced when requests grows
}

// Start starts a control plane serving node on a free loopback port; it
// stops when the test ends.
func Start(t testing.TB, node string) *ControlPlane {
	t.Helper()
	cp := &ControlPlane{t: t, node: node, cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil), changed: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cp.addr = ln.Addr().String()
	cp.serve(ln)
	t.Cleanup(cp.Stop)
	return cp
}

// Addr is the control plane's host:port.
func (cp *ControlPlane) Addr() string { return cp.addr }

func (cp *ControlPlane) serve(ln net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			cp.mu.Lock()
			cp.headers = append(cp.headers, md)
			cp.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			cp.mu.Lock()
			cp.requests = append(cp.requests, req)
			close(cp.changed)
			cp.changed = make(chan struct{})
			cp.mu.Unlock()
			return nil
		},
	}
	srv := serverv3.NewServer(ctx, cp.cache, cb)
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	cp.mu.Lock()
	cp.gs, cp.cancel = gs, cancel
	cp.mu.Unlock()
	go gs.Serve(ln)
}

// Push sets the node's snapshot: version and the configurations, one
// resource each.
func (cp *ControlPlane) Push(version string, cfgs ...*confv3.RateLimitConfig) {
	cp.t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		cp.t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), cp.node, snap); err != nil {
		cp.t.Fatal(err)
	}
}

// Stop stops serving, closing every stream. Stopping twice is harmless.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	gs, cancel := cp.gs, cp.cancel
	cp.gs, cp.cancel = nil, nil
	cp.mu.Unlock()
	if gs != nil {
		cancel()
		gs.Stop()
	}
}

// Restart serves again on the same address, with the snapshot it had.
func (cp *ControlPlane) Restart() {
	cp.t.Helper()
	cp.Stop()
	var ln net.Listener
	var err error
	for range 100 { // the old listener's port may take a moment to free
		if ln, err = net.Listen("tcp", cp.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		cp.t.Fatal(err)
	}
	cp.serve(ln)
}

// Requests returns the discovery requests received so far, in order.
func (cp *ControlPlane) Requests() []*discoveryv3.DiscoveryRequest {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.requests)
}

// Headers returns the gRPC metadata of each stream opened so far.
func (cp *ControlPlane) Headers() []metadata.MD {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.headers)
}

// WaitRequest waits up to timeout for a request that ok accepts and
// returns it, or fails the test.
func (cp *ControlPlane) WaitRequest(timeout time.Duration, what string, ok func(*discoveryv3.DiscoveryRequest) bool) *discoveryv3.DiscoveryRequest {
	cp.t.Helper()
	deadline := time.After(timeout)
	for seen := 0; ; {
		cp.mu.Lock()
		reqs, changed := cp.requests[seen:], cp.changed
		seen = len(cp.requests)
		cp.mu.Unlock()
		for _, r := range reqs {
			if ok(r) {
				return r
			}
		}
		select {
		case <-changed:
		case <-deadline:
			cp.t.Fatalf("the control plane saw no request %s within %v (of %d)", what, timeout, len(cp.Requests()))
			return nil
		}
	}
}
