package engine

import (
	"math"
	"testing"
)

// TestBackoffAnyAttempt: the wait after a conflict stays within 2ms for
// any attempt, however many retries SwapOptions allows (a shift of 25µs by
// 40 or more overflowed, and rand.N panicked on the result).
func TestBackoffAnyAttempt(t *testing.T) {
	for _, attempt := range []int{0, 1, 2, 7, 8, 39, 40, 63, 64, 100, 1000, math.MaxInt} {
		backoff(attempt)
	}
}
