package redis_test

import (
	"testing"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/backendtest"
	"github.com/sluice-go/sluice/backend/redis"
)

func TestSwapperConformance(t *testing.T) {
	backendtest.RunSwapper(t, func(t *testing.T) backend.Swapper {
		return open(t, []string{server(t).Addr}, redis.Options{})
	})
}
