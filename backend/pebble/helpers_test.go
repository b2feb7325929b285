package pebble

import "sync/atomic"

// atomicInt64 is a clock tests move while a sweeper reads it.
type atomicInt64 struct{ atomic.Int64 }
