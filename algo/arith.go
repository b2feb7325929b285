package algo

import "math/bits"

// Exact a*b/c for unsigned 64-bit operands, through a 128-bit product. The
// caller guarantees the quotient fits in 64 bits (the callers' parameter
// limits make it so); an overflowing quotient saturates instead of panicking.

func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return ^uint64(0)
	}
	q, _ := bits.Div64(hi, lo, c)
	return q
}

func mulDivCeil(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return ^uint64(0)
	}
	q, r := bits.Div64(hi, lo, c)
	if r != 0 {
		q++
	}
	return q
}

// mulDivRem is mulDiv that also returns the remainder.
func mulDivRem(a, b, c uint64) (q, r uint64) {
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return ^uint64(0), 0
	}
	return bits.Div64(hi, lo, c)
}

// clampI64 converts a saturated unsigned result to int64.
func clampI64(u uint64) int64 {
	if u > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(u)
}

// u128 is an unsigned 128-bit integer, for the sliding counter's scaled sums.
type u128 struct{ hi, lo uint64 }

func mul128(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, c := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, c)
	return u128{hi, lo}
}

func (x u128) less(y u128) bool { return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo) }

// floorRoom returns floor((total-used)/w), or 0 when used >= total.
func floorRoom(total, used u128, w int64) int64 {
	if !used.less(total) {
		return 0
	}
	lo, b := bits.Sub64(total.lo, used.lo, 0)
	hi, _ := bits.Sub64(total.hi, used.hi, b)
	if hi >= uint64(w) {
		return 1<<63 - 1
	}
	q, _ := bits.Div64(hi, lo, uint64(w))
	return clampI64(q)
}
