package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/backend/pebble"
)

// Five orders a minute per user, in one import.
func ExampleNewLimiter() {
	lim, err := sluice.NewLimiter(5, time.Minute)
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	for i := 1; i <= 6; i++ {
		fmt.Println(i, lim.Allow("user:u-1"))
	}
	fmt.Println("another user:", lim.Allow("user:u-2"))
	// Output:
	// 1 true
	// 2 true
	// 3 true
	// 4 true
	// 5 true
	// 6 false
	// another user: true
}

// Take spends a cost and says what is left and when to come back.
func ExampleLimiter_Take() {
	lim, err := sluice.NewLimiter(10, time.Minute)
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	ctx := context.Background()
	for _, cost := range []int64{4, 4, 4} {
		d, err := lim.Take(ctx, "tenant:acme", cost)
		if err != nil {
			panic(err) // a store failure or an invalid cost; a denial is not an error
		}
		fmt.Println(cost, d.Allowed, d.Remaining, d.RetryAfter.Round(time.Second))
	}
	// Output:
	// 4 true 6 0s
	// 4 true 2 0s
	// 4 false 2 12s
}

// Wait blocks until the request passes, within the context's deadline.
func ExampleLimiter_Wait() {
	lim, err := sluice.NewLimiter(1, 20*time.Millisecond)
	if err != nil {
		panic(err)
	}
	defer lim.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for i := 1; i <= 3; i++ {
		if err := lim.Wait(ctx, "worker"); err != nil {
			panic(err)
		}
		fmt.Println("job", i)
	}

	// A wait the deadline cannot cover (an hour, against a minute) returns
	// ErrWaitExceedsDeadline at once, rather than sleeping towards it.
	hourly, err := sluice.NewLimiter(1, time.Hour)
	if err != nil {
		panic(err)
	}
	defer hourly.Close()
	hourly.Allow("report")
	minute, cancelMinute := context.WithTimeout(context.Background(), time.Minute)
	defer cancelMinute()
	err = hourly.Wait(minute, "report")
	fmt.Println(errors.Is(err, sluice.ErrWaitExceedsDeadline))
	// Output:
	// job 1
	// job 2
	// job 3
	// true
}

// The same limiter over Pebble by one option: budgets survive a restart.
// (A *redis.Store shares them across a fleet the same way.)
func ExampleWithStore() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	for run := 1; run <= 2; run++ {
		store, err := pebble.Open(dir, nil)
		if err != nil {
			panic(err)
		}
		lim, err := sluice.NewLimiter(1, time.Hour, sluice.WithStore(store))
		if err != nil {
			panic(err)
		}
		fmt.Println("run", run, lim.Allow("user:u-1"))
		lim.Close() // closes the store too
	}
	// Output:
	// run 1 true
	// run 2 false
}
