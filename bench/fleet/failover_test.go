package fleet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend/redis"
	"github.com/sluice-go/sluice/backend/redis/redistest"
	"github.com/sluice-go/sluice/engine"
)

// A Sentinel failover mid-load: a primary, one replica and a Sentinel
// (down-after 1s); 64 callers over 200 users, each spent to its limit
// before the primary is killed (SIGKILL). The store follows the Sentinel
// to the promoted replica, with the default options. Measured, and
// written in the README: how long decisions take to resume after the
// kill, and what the failover over-admits (the writes the replica had not
// received). Checked: decisions resume, every failure in between is a
// store error within the deadline, the gateway that lived through the
// failover admits no spent user again, and a new gateway finds no more
// budget restored than the last second before the kill spent.
func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a Sentinel failover")
	}
	primary := redistest.Start(t)
	host, port, _ := net.SplitHostPort(primary.Addr)
	replica := redistest.Start(t, "--replicaof", host, port)
	for start := time.Now(); !strings.Contains(replica.Do(t, "INFO", "replication"), "master_link_status:up"); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatal("the replica did not connect to the primary in 10s")
		}
	}
	sentinel := redistest.StartSentinel(t, primary, "fleet")
	for start := time.Now(); !strings.Contains(sentinel.Do(t, "SENTINEL", "REPLICAS", "fleet"), replica.Addr[strings.LastIndex(replica.Addr, ":")+1:]); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			t.Fatal("the Sentinel did not learn of the replica in 20s")
		}
	}

	o := redis.Options{KeyPrefix: fmt.Sprintf("fleet:%s:", t.Name())}
	viaSentinel := redis.ClientOptions{Addrs: []string{sentinel.Addr}, MasterName: "fleet"}
	s, e := gatewayOn(t, viaSentinel, o)

	// Callers ask for 200 users, spent to their limit before the kill,
	// and for a new user in one request of four: a decision that must
	// reach Redis.
	const users = 200
	var (
		killed, back time.Time
		spent        bool // every user denied before the kill
		fresh        atomic.Int64
		after        atomic.Bool // the primary has been killed
	)
	l := drivePicking(e, func() string {
		if after.Load() && rand.N(4) == 0 {
			return fmt.Sprintf("new-%d", fresh.Add(1))
		}
		return fmt.Sprintf("user-%d", rand.N(users))
	}, 300*time.Millisecond, func() {
		// Every user spent: half a second of load at least, and until
		// the next decision of each is a denial (a machine running other
		// builds takes longer over the 4000 admissions).
		for start := time.Now(); time.Since(start) < 500*time.Millisecond || !spent; time.Sleep(20 * time.Millisecond) {
			if time.Since(start) > 30*time.Second {
				break
			}
			spent = allSpent(e, users)
		}
		killed = time.Now()
		after.Store(true)
		primary.Crash()
		for i := 0; ; i++ {
			if _, err := e.Apply(context.Background(), limit, fmt.Sprintf("probe-%d", i), 1); err == nil {
				back = time.Now()
				return
			}
			if time.Since(killed) > 30*time.Second {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	if back.IsZero() {
		t.Fatalf("no decision reached Redis within 30s of the primary's kill (breaker %+v)", s.Breaker())
	}
	checkErrors(t, l)
	wantWithinDeadline(t, l)
	before, spentLate := 0, 0
	for _, c := range l.calls {
		if c.start.Before(killed) && c.allowed {
			before++
			if killed.Sub(c.finished) < time.Second {
				spentLate++
			}
		}
	}
	if !spent || before > users*20 {
		t.Fatalf("%d admissions before the kill (every user denied: %v), want every user spent (%d)", before, spent, users*20)
	}
	for u, n := range l.allowed() {
		if strings.HasPrefix(u, "user-") && n > 20 {
			t.Errorf("%s admitted %d times by the gateway that saw the failover", u, n)
		}
	}
	// Another gateway, new after the failover, knows only what the new
	// primary holds: what it admits of the spent users is what the
	// failover lost.
	_, e2 := gatewayOn(t, viaSentinel, o)
	lost := 0
	for u := range users {
		d, err := e2.Apply(context.Background(), limit, fmt.Sprintf("user-%d", u), 1)
		if err != nil {
			t.Fatalf("a new gateway after the failover: %v", err)
		}
		if d.Allowed {
			lost++
		}
	}
	if lost > spentLate {
		t.Errorf("the new primary lost %d users' spending, more than the %d admissions of the last second before the kill", lost, spentLate)
	}
	t.Logf("Sentinel failover (down-after 1s): decisions reached Redis again %v after the kill; %d store errors meanwhile, the slowest decision %v; "+
		"a new gateway found %d of %d spent users with budget (admitted in the last second before the kill: %d)",
		back.Sub(killed).Round(time.Millisecond), len(l.errors()), l.slowest().Round(time.Millisecond), lost, users, spentLate)
}

// allSpent reports whether the next decision of each of users is a
// denial, without spending.
func allSpent(e *engine.Engine, users int) bool {
	for u := range users {
		if d, err := e.Peek(context.Background(), limit, fmt.Sprintf("user-%d", u), 1); err != nil || d.Allowed {
			return false
		}
	}
	return true
}
