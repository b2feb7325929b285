package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-go/sluice/algo"
	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/engine"
)

func TestSwapperConformance(t *testing.T) {
	backendtest.RunSwapper(t, func(t *testing.T) backend.Swapper {
		return open(t, []string{server(t).Addr}, redis.Options{})
	})
}

func TestSwapperConformanceAutoPipeline(t *testing.T) {
	backendtest.RunSwapper(t, func(t *testing.T) backend.Swapper {
		opened++
		s, err := redis.Open(redis.ClientOptions{Addrs: []string{server(t).Addr}, AutoPipeline: true},
			&redis.Options{Timeout: testTimeout, KeyPrefix: fmt.Sprintf("%s%d:", prefix(t), opened)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestClusterWithAndWithoutAutoPipeline(t *testing.T) {
	// The suite's multi-key swaps use plain keys of different hash tags,
	// which a Cluster cannot swap together: they are refused with
	// ErrCrossSlot (TestClusterApplyAll); the single-key cases run here.
	c := cluster(t)
	for _, pipe := range []bool{false, true} {
		s, err := redis.Open(redis.ClientOptions{Addrs: c.Addrs(), AutoPipeline: pipe}, &redis.Options{Timeout: testTimeout, KeyPrefix: fmt.Sprintf("%s%v:", prefix(t), pipe)})
		if err != nil {
			t.Fatal(err)
		}
		e := newEngine(t, s, engine.Options{})
		l := engine.Limit{Namespace: "p", Algorithm: algo.MustNew(algo.TokenBucketName, algo.Params{Limit: 3, Window: time.Hour})}
		for i := range 4 {
			d, err := e.Apply(context.Background(), l, fmt.Sprintf("user:%d", i%2), 1)
			if err != nil || !d.Allowed {
				t.Fatalf("auto-pipeline %v, request %d: %+v, %v", pipe, i, d, err)
			}
		}
		if err := e.Reset(context.Background(), l, "user:0"); err != nil {
			t.Fatal(err)
		}
	}
}
