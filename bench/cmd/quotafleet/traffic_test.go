package main

import (
	"slices"
	"testing"
)

// TestTrafficSameForEverySystem: a seed gives the same calls in the same
// order (every system is driven by them), another seed other calls, and
// the skew puts the first organisation and, within each, the first user
// ahead of the others.
func TestTrafficSameForEverySystem(t *testing.T) {
	a, b := traffic(5000, 8, 40, 35), traffic(5000, 8, 40, 35)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave different calls")
	}
	if slices.Equal(a, traffic(5000, 8, 40, 36)) {
		t.Fatal("another seed gave the same calls")
	}
	orgs := make([]int, 8)
	users := make([]int, 40)
	for _, c := range a {
		if c.org < 0 || c.org >= 8 || c.user < 0 || c.user >= 40 {
			t.Fatalf("call %+v out of range", c)
		}
		orgs[c.org]++
		users[c.user]++
	}
	if orgs[0] <= orgs[1] || orgs[1] <= orgs[7] {
		t.Errorf("organisations' calls %v: want org0 > org1 > org7", orgs)
	}
	if users[0] <= users[1] || users[1] <= users[39] {
		t.Errorf("users' calls %v: want u0 > u1 > u39", users)
	}
}

// TestBounds: the most admitted of an organisation and of a user, and who
// is over its limit.
func TestBounds(t *testing.T) {
	o := options{orgs: 2, users: 3, orgLimit: 10, userLimit: 4}
	n := [][]int64{{4, 4, 3}, {5, 1, 0}}
	maxOrg, maxUser, orgsOver, usersOver := bounds(o, func(org, u int) int64 { return n[org][u] })
	if maxOrg != 11 || maxUser != 5 || orgsOver != 1 || usersOver != 1 {
		t.Errorf("bounds = %d, %d, %d, %d; want 11, 5, 1, 1", maxOrg, maxUser, orgsOver, usersOver)
	}
}

// TestDrive: every call is made once, and its outcome counted under its
// organisation and user.
func TestDrive(t *testing.T) {
	calls := traffic(1000, 3, 5, 1)
	tl, _ := drive(calls, 8, 3, 5, func(_, i int, c call) outcome {
		if c.user == 0 {
			return denied
		}
		return admitted
	}, 10, func() {})
	want := newTally(3, 5)
	for _, c := range calls {
		if c.user == 0 {
			want.n[c.org][c.user][denied]++
		} else {
			want.n[c.org][c.user][admitted]++
		}
	}
	for o := range 3 {
		if !slices.Equal(tl.n[o], want.n[o]) {
			t.Errorf("org %d: %v, want %v", o, tl.n[o], want.n[o])
		}
	}
	if tl.total(admitted)+tl.total(denied) != 1000 {
		t.Errorf("%d calls counted, want 1000", tl.total(admitted)+tl.total(denied))
	}
}
