package algo

import (
	"testing"
	"time"

	"github.com/sluice-go/sluice/codec"
)

// otherAlgorithm is an Algorithm of another package's making: it must take
// the slow path.
type otherAlgorithm struct{ Algorithm }

// TestFastPath: every algorithm in the table is stepped, charged and
// refunded, and its capacity read, by StepInto's, Charge's, Refund's and
// Capacity's own cases, never through the interface (a forgotten case
// would cost every decision an interface call and a copied Decision, and
// nothing else would notice). An algorithm of another
// package's making does take the slow path, which shows the hooks work.
func TestFastPath(t *testing.T) {
	step, capacity, charge, refund := stepOther, capacityOther, chargeOther, refundOther
	t.Cleanup(func() { stepOther, capacityOther, chargeOther, refundOther = step, capacity, charge, refund })
	var slow []string
	chargeOther = func(a Algorithm, state []byte, now, n int64) ([]byte, int64, Decision) {
		slow = append(slow, "Charge "+string(a.Name()))
		return charge(a, state, now, n)
	}
	refundOther = func(a Algorithm, state []byte, now, at, n int64) ([]byte, int64, Decision) {
		slow = append(slow, "Refund "+string(a.Name()))
		return refund(a, state, now, at, n)
	}
	stepOther = func(a Algorithm, state []byte, now, cost int64) ([]byte, Decision) {
		slow = append(slow, "StepInto "+string(a.Name()))
		return step(a, state, now, cost)
	}
	capacityOther = func(a Algorithm) int64 {
		slow = append(slow, "Capacity "+string(a.Name()))
		return capacity(a)
	}
	p := Params{Limit: 3, Window: time.Second}
	for _, k := range kinds {
		a := MustNew(k.name, p)
		var d Decision
		state := StepInto(a, nil, 1_700_000_000e9, 1, &d)
		if !d.Allowed || Capacity(a) != 3 {
			t.Errorf("%s: StepInto %+v, Capacity %d", k.name, d, Capacity(a))
		}
		state, charged := Charge(a, state, 1_700_000_000e9, 1, &d)
		if _, refunded := Refund(a, state, 1_700_000_000e9, 1_700_000_000e9, 2, &d); charged != 1 || refunded != 2 {
			t.Errorf("%s: Charge(1) = %d, Refund(2) = %d", k.name, charged, refunded)
		}
	}
	if len(slow) != 0 {
		t.Fatalf("took the slow path: %v", slow)
	}
	other := otherAlgorithm{MustNew(TokenBucketName, p)}
	var d Decision
	StepInto(other, nil, 1_700_000_000e9, 1, &d)
	Capacity(other)
	if _, charged := Charge(other, nil, 1_700_000_000e9, 1, &d); charged != 0 || !d.Allowed || d.Limit != 3 {
		t.Errorf("an algorithm of another package, not a Settler: Charge = %d, %+v", charged, d)
	}
	Refund(other, nil, 1_700_000_000e9, 1_700_000_000e9, 1, &d)
	if len(slow) != 4 {
		t.Fatalf("an algorithm of another package: slow path taken %v, want StepInto, Capacity, Charge, Refund", slow)
	}
}

// TestTable: the table and what it builds agree: names are unique and are
// what the algorithms call themselves, each writes records under its tag at
// the codec's latest version, and exactly the bucket algorithms take a
// burst.
func TestTable(t *testing.T) {
	seen := map[Name]bool{}
	tags := map[codec.Tag]bool{}
	for i, k := range kinds {
		if seen[k.name] || tags[k.tag] {
			t.Errorf("%s (tag %d) appears twice", k.name, k.tag)
		}
		seen[k.name], tags[k.tag] = true, true
		if Names[i] != k.name {
			t.Errorf("Names[%d] = %q, the table says %q", i, Names[i], k.name)
		}
		a := MustNew(k.name, Params{Limit: 3, Window: time.Second})
		if a.Name() != k.name {
			t.Errorf("%s builds an algorithm named %q", k.name, a.Name())
		}
		rec, _ := a.Step(nil, 1_700_000_000e9, 1)
		v, tag, err := codec.Header(rec)
		if err != nil || tag != k.tag || v != codec.Latest(k.tag) || !codec.Valid(rec) {
			t.Errorf("%s writes %x: version %d, tag %v, %v; want version %d, tag %v", k.name, rec, v, tag, err, codec.Latest(k.tag), k.tag)
		}
		if k.tag.String() != string(k.name) {
			t.Errorf("tag %d is named %q by the codec, %q here", k.tag, k.tag.String(), k.name)
		}
		_, err = New(k.name, Params{Limit: 3, Window: time.Second, Burst: 5})
		if (err == nil) != k.bucket {
			t.Errorf("%s with a burst: %v; it is a bucket algorithm: %v", k.name, err, k.bucket)
		}
	}
}

// A Name is known exactly when it is one of Names: the word a file writes
// and the constant Go code passes are one value.
func TestNameKnown(t *testing.T) {
	for _, n := range Names {
		if !n.Known() {
			t.Errorf("%q.Known() = false, want true", n)
		}
		if _, err := New(n, Params{Limit: 1, Window: 1e9}); err != nil {
			t.Errorf("New(%q) = %v", n, err)
		}
	}
	for _, n := range []Name{"", "token-bucket", "Token_Bucket", "gcra ", "custom"} {
		if n.Known() {
			t.Errorf("%q.Known() = true, want false", n)
		}
	}
	var fromFile string = "gcra" // as a decoded file gives it
	if Name(fromFile) != GCRAName {
		t.Errorf("Name(%q) != GCRAName", fromFile)
	}
}
