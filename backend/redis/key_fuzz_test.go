package redis

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzKeyLayout: every key the engine can make (any namespace and caller
// key bytes) maps to a Redis key whose hash tag is the whole caller key, and
// back to itself; any Redis name under the prefix decodes without panicking,
// and what decodes encodes back to the same name.
func FuzzKeyLayout(f *testing.F) {
	f.Add("orders", "user:42", "sluice:{user:42}:orders")
	f.Add("", "}{%", "sluice:{%7D%7B%25}:")
	f.Add("a:b}", "ip:2001:db8::/64", "sluice:{x}")
	f.Add("ns", "%7B", "sluice:{%zz}:ns")
	s := &Store{prefix: DefaultKeyPrefix}
	f.Fuzz(func(t *testing.T, ns, key, name string) {
		k := binary.AppendUvarint(nil, uint64(len(ns)))
		k = append(append(k, ns...), key...)
		rk := s.redisKey(k)
		back, ok := s.engineKey(rk)
		if !ok || !bytes.Equal(back, k) {
			t.Fatalf("key %q → %q → %q, %v", k, rk, back, ok)
		}
		if tg, ok := unescape(tag(rk)); !ok || tg != key {
			t.Fatalf("the hash tag of %q is %q, want the caller key %q", rk, tag(rk), key)
		}
		if other := s.redisKey(append(binary.AppendUvarint(nil, 1), append([]byte("z"), key...)...)); tag(other) != tag(rk) {
			t.Fatalf("one caller's keys in two namespaces have tags %q and %q", tag(other), tag(rk))
		}
		if k2, ok := s.engineKey(name); ok {
			if again := s.redisKey(k2); again != name {
				t.Fatalf("%q decodes to %q, which encodes to %q", name, k2, again)
			}
		}
	})
}

// FuzzParseReply: any reply the script could be made to return parses or
// fails with an error, never a panic; a reply that parses carries the time
// it was given.
func FuzzParseReply(f *testing.F) {
	f.Add(int64(1), int64(1700000000123456), "", 0)
	f.Add(int64(0), int64(1700000000000001), "abc", 2)
	f.Add(int64(7), int64(-1), "", 1)
	f.Fuzz(func(t *testing.T, flag, usec int64, rec string, n int) {
		if n < 0 || n > 8 {
			return
		}
		reply := []any{flag, usec}
		for i := range n {
			if i%2 == 0 {
				reply = append(reply, rec)
			} else {
				reply = append(reply, nil)
			}
		}
		if _, now, _, err := parseReply(reply, n); err == nil && now/1000 != usec {
			t.Fatalf("time %d µs parsed as %d ns", usec, now)
		}
		parseReply(reply, n+1)
		parseReply(reply[:min(len(reply), 1)], n)
		parseReply([]any{flag, "1700000000", "1"}, n)
	})
}
