package backend

import (
	"encoding/binary"
	"math/bits"
	"strings"
)

// A level of a hierarchy counted within its tenant (package sluice's
// groups: a user's budget within an organisation's) has a caller key of
// its own form, made by NestedKey from the tenant's caller key and the
// level's own:
//
//	0x00 + uvarint(len(tenant)) + tenant + own
//
// The leading NUL byte sets it apart from every caller key a door makes
// (package identity's begin with their kind, "user:", "attr:" and so on,
// and a Door refuses a key beginning with a NUL); the tenant's length, in
// the shortest uvarint, makes the split unambiguous whatever bytes either
// part holds. The engine and the stores keep it as any caller key
// (AppendKey), but a store whose keys are placed by a part of their name,
// as a Redis Cluster places a key by its hash tag, may place it by its
// tenant (SplitNested), so that every level of one tenant's request lies
// in one place.

// NestedKey returns the caller key of a level counted within the tenant
// whose caller key is tenant, own being the level's own caller key: see
// SplitNested for the reverse.
func NestedKey(tenant, own string) string {
	var n [binary.MaxVarintLen64]byte
	var b strings.Builder // one allocation, the key's
	b.Grow(1 + binary.MaxVarintLen64 + len(tenant) + len(own))
	b.WriteByte(0)
	b.Write(binary.AppendUvarint(n[:0], uint64(len(tenant))))
	b.WriteString(tenant)
	b.WriteString(own)
	return b.String()
}

// AppendNested appends NestedKey(tenant, own) to dst.
func AppendNested(dst []byte, tenant, own string) []byte {
	dst = append(dst, 0)
	dst = binary.AppendUvarint(dst, uint64(len(tenant)))
	dst = append(dst, tenant...)
	return append(dst, own...)
}

// SplitNested splits a caller key made by NestedKey into the tenant's key
// and the level's own, as a string or as bytes (a store's key, without a
// copy). ok is false for any other key: one not beginning with a NUL
// byte, or whose length is not in the shortest uvarint or runs past its
// end, so that each key NestedKey can make is split, and no other.
func SplitNested[K ~string | ~[]byte](key K) (tenant, own K, ok bool) {
	if len(key) < 2 || key[0] != 0 {
		return tenant, own, false
	}
	var head [binary.MaxVarintLen64]byte
	m := copy(head[:], key[1:])
	n, w := binary.Uvarint(head[:m])
	// (bits.Len64(n|1)+6)/7 is the length of n's shortest uvarint.
	if w <= 0 || w != (bits.Len64(n|1)+6)/7 || n > uint64(len(key)-1-w) {
		return tenant, own, false
	}
	rest := key[1+w:]
	return rest[:n], rest[n:], true
}
