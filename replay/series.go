package replay

// maxBuckets bounds a series' length: past it, neighbouring buckets are
// merged and the resolution halves.
const maxBuckets = 4096

// series counts events in time buckets from an origin, at a resolution
// that starts at one second and doubles as often as the span needs, so
// that a series of any span stays at most maxBuckets long and is exact at
// its resolution.
type series struct {
	origin int64   // Unix ns of bucket 0
	res    int64   // bucket width, ns
	n      []int64 // counts
}

func newSeries(origin int64) *series { return &series{origin: origin, res: 1e9} }

// add counts v at t (not before the origin).
func (s *series) add(t, v int64) {
	i := (t - s.origin) / s.res
	if i < 0 {
		i = 0
	}
	for i >= maxBuckets {
		s.halve()
		i = (t - s.origin) / s.res
	}
	for int64(len(s.n)) <= i {
		s.n = append(s.n, 0)
	}
	s.n[i] += v
}

// halve merges neighbouring buckets.
func (s *series) halve() {
	m := (len(s.n) + 1) / 2
	for k := 0; k < m; k++ {
		v := s.n[2*k]
		if 2*k+1 < len(s.n) {
			v += s.n[2*k+1]
		}
		s.n[k] = v
	}
	s.n = s.n[:m]
	s.res *= 2
}

// at returns the count in the bucket starting at origin+i·res.
func (s *series) at(i int) int64 {
	if i < len(s.n) {
		return s.n[i]
	}
	return 0
}
