package redis

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/sluice-go/sluice/backend"
	"github.com/sluice-go/sluice/internal/braces"
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
		want := key // the tag: the caller key, or a nested key's tenant
		if tenant, _, ok := backend.SplitNested(key); ok {
			want = string(tenant)
		}
		if tg, ok := braces.Unescape(tag(rk)); !ok || tg != want {
			t.Fatalf("the hash tag of %q is %q, want %q", rk, tag(rk), want)
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

// FuzzNestedKeyLayout: a level's key within its tenant (backend.NestedKey)
// of any bytes maps to a Redis key whose hash tag is the whole tenant key,
// the tag of the tenant's own records, and back to itself; two different
// (namespace, tenant, own) triples never share a Redis key, nor does a
// nested key share one with an un-nested key of any caller.
func FuzzNestedKeyLayout(f *testing.F) {
	f.Add("user-minute", "attr:acme", "user:alice", "team-minute", "attr:acme", "attr:red")
	f.Add("ns", "attr:a}{b", "user:%7D", "ns", "attr:a", "}{buser:%7D")
	f.Add("n", "", "\x00\x01x", "n", "\x00", "\x01x")
	f.Add("n", "attr:acme", "", "n", "", "attr:acme")
	s := &Store{prefix: DefaultKeyPrefix}
	f.Fuzz(func(t *testing.T, ns, tenant, own, ns2, tenant2, own2 string) {
		nested := func(ns, tenant, own string) []byte {
			k := binary.AppendUvarint(nil, uint64(len(ns)))
			return append(append(k, ns...), backend.NestedKey(tenant, own)...)
		}
		k := nested(ns, tenant, own)
		rk := s.redisKey(k)
		if back, ok := s.engineKey(rk); !ok || !bytes.Equal(back, k) {
			t.Fatalf("key %q → %q → %q, %v", k, rk, back, ok)
		}
		if tg, ok := braces.Unescape(tag(rk)); !ok || tg != tenant {
			t.Fatalf("the hash tag of %q is %q, want the tenant's key %q", rk, tag(rk), tenant)
		}
		_, _, tenantNested := backend.SplitNested(tenant) // a key no door makes a tenant of
		if s.SwapGroup(k) != "" || !tenantNested && (&Store{prefix: DefaultKeyPrefix, cluster: true}).SwapGroup(k) != tag(s.redisKey(append(binary.AppendUvarint(nil, 3), "org"+tenant...))) {
			t.Fatalf("%q swaps apart from its tenant's own records", rk)
		}
		if other := s.redisKey(nested(ns2, tenant2, own2)); (other == rk) != (ns == ns2 && tenant == tenant2 && own == own2) {
			t.Fatalf("(%q, %q, %q) and (%q, %q, %q) are stored as %q and %q", ns, tenant, own, ns2, tenant2, own2, rk, other)
		}
		// An un-nested key of any caller: the engine's own for it is
		// another, and so is the Redis key.
		plain := binary.AppendUvarint(nil, uint64(len(ns2)))
		plain = append(append(plain, ns2...), own2...)
		if _, _, isNested := backend.SplitNested(own2); !isNested && s.redisKey(plain) == rk {
			t.Fatalf("the nested %q and the un-nested %q are both stored as %q", k, plain, rk)
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
