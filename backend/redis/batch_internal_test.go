package redis

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/backend/redis/redistest"
)

// TestSendBatch: one batch of independent swaps over a real Redis, each
// kind of swap beside the others; each is compared and written on its own,
// whatever the others find.
func TestSendBatch(t *testing.T) {
	srv := redistest.Start(t)
	s, err := Open(ClientOptions{Addrs: []string{srv.Addr}}, &Options{KeyPrefix: "b:", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	long := make([]byte, 100) // compared by its digest
	for i := range long {
		long[i] = byte(i)
	}
	for k, v := range map[string][]byte{"held": []byte("v1"), "other": []byte("v2"), "kept": []byte("v3"), "gone": []byte("v4"), "long": long} {
		if err := s.Put([]byte(k), v, time.Now().Add(time.Minute).UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	swaps := []backend.Swap{
		{Key: []byte("fresh"), Value: []byte("n1"), TTL: time.Minute},                         // absent, as expected: written
		{Key: []byte("held"), Value: []byte("n2"), TTL: time.Minute},                          // expected absent, holds v1
		{Key: []byte("other"), Expected: []byte("v2"), Value: []byte("n3"), TTL: time.Minute}, // as expected: written
		{Key: []byte("kept"), Expected: []byte("xx"), Value: []byte("n4"), TTL: time.Minute},  // holds v3, not xx
		{Key: []byte("none"), Expected: []byte("v5"), Value: []byte("n5"), TTL: time.Minute},  // expected v5, absent
		{Key: []byte("gone"), Expected: []byte("v4")},                                         // deleted
		{Key: []byte("long"), Expected: long, Keep: true, TTL: time.Hour},                     // compared only, kept an hour
	}
	var batch []*batchCall
	for i := range swaps {
		batch = append(batch, &batchCall{c: s.oneCallFor(&swaps[i])})
	}
	s.sendBatch(batch)
	want := []struct {
		ok  bool
		cur string
	}{{true, ""}, {false, "v1"}, {true, ""}, {false, "v3"}, {false, ""}, {true, ""}, {true, ""}}
	for i, bc := range batch {
		if r := bc.res; r.err != nil || r.ok != want[i].ok || string(r.cur) != want[i].cur || r.now <= 0 {
			t.Errorf("swap %d (%s): ok %v, cur %q, now %d, %v; want ok %v, cur %q", i, swaps[i].Key, r.ok, r.cur, r.now, r.err, want[i].ok, want[i].cur)
		}
	}
	for k, v := range map[string]string{"fresh": "n1", "held": "v1", "other": "n3", "kept": "v3", "none": "", "gone": "", "long": string(long)} {
		got, err := s.Get([]byte(k), 0)
		if err != nil || string(got) != v {
			t.Errorf("%s holds %q (%v), want %q", k, got, err, v)
		}
	}
	if ttl, _ := strconv.Atoi(strings.TrimSpace(srv.Do(t, "PTTL", s.redisKey([]byte("long"))))); ttl < 3500000 {
		t.Errorf("the kept record's PTTL is %dms, want about an hour", ttl)
	}
}
