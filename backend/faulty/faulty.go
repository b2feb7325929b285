package faulty

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-go/sluice/backend"
)

// Wrap returns inner wrapped, and the Faults that control the wrapper. The
// wrapper has no rules at first: it forwards every call. It implements
// exactly the interfaces of package backend that inner implements (its
// path, backend.Striped, backend.Durable or backend.Swapper, or none; and
// beside a plain or swap store's, backend.Stats and backend.Sweeper), so an
// engine over the wrapper takes the same path as over inner. Closing the
// wrapper closes inner (unless a rule fails the Close).
func Wrap(inner backend.Backend) (backend.Backend, *Faults) {
	f := &Faults{}
	return wrap(f, inner), f
}

// ErrInjected is an error for a Rule to return when any error will do.
var ErrInjected = errors.New("sluice/backend/faulty: injected failure")

// Op names a backend operation a Rule can pick.
type Op uint8

// The operations a Rule can pick. Lock, Unlock, Stripes, Len, Evictions
// and SwapGroup are forwarded and never faulted.
const (
	OpGet Op = iota + 1
	OpPut
	OpDelete
	OpClose
	OpGetLocked
	OpPutLocked
	OpDeleteLocked
	OpWriteBatch
	OpLoad
	OpRange
	OpSweep
	OpCompareAndSwap
	OpExtendLocked
	OpWatchDeletes
	numOps
)

var opNames = [...]string{
	OpGet: "Get", OpPut: "Put", OpDelete: "Delete", OpClose: "Close",
	OpGetLocked: "GetLocked", OpPutLocked: "PutLocked", OpDeleteLocked: "DeleteLocked",
	OpWriteBatch: "WriteBatch", OpLoad: "Load", OpRange: "Range",
	OpSweep: "Sweep", OpCompareAndSwap: "CompareAndSwap",
	OpExtendLocked: "ExtendLocked", OpWatchDeletes: "WatchDeletes",
}

// String returns the operation's method name.
func (op Op) String() string {
	if op > 0 && op < numOps {
		return opNames[op]
	}
	return fmt.Sprintf("Op(%d)", uint8(op))
}

// Groups of operations, for Rule.Ops.
var (
	// Reads are the operations that return a record: Get, GetLocked and
	// Load.
	Reads = []Op{OpGet, OpGetLocked, OpLoad}
	// Writes are the operations that change records: Put, PutLocked,
	// Delete, DeleteLocked, WriteBatch and CompareAndSwap. (ExtendLocked,
	// which only ever keeps a record longer, is not among them.)
	Writes = []Op{OpPut, OpPutLocked, OpDelete, OpDeleteLocked, OpWriteBatch, OpCompareAndSwap}
)

// Call describes one call to the wrapper, as a Rule's Match sees it.
type Call struct {
	// Op is the operation called.
	Op Op
	// N is the call's number among calls of Op through this wrapper,
	// counting from 1 and including calls a rule failed.
	N int
	// Key is the key of a single-key operation, and Range's start key; nil
	// for WriteBatch, Sweep, WatchDeletes and Close. It is valid only
	// during Match.
	Key []byte
	// Batch is WriteBatch's writes; valid only during Match.
	Batch []backend.Write
	// Swaps is CompareAndSwap's swaps; valid only during Match.
	Swaps []backend.Swap
}

// Rule picks calls and says what happens to them. A call matches a rule when
// its operation is in Ops (or Ops is empty) and Match (when set) returns
// true. The first Skip matching calls pass untouched; the next Times
// matching calls (every later one when Times is zero) are faulted.
//
// A faulted call waits for Hold to close, then sleeps Delay, then either
// returns Err without reaching the wrapped backend, or reaches it and, for
// a read, returns Corrupt's bytes in place of the record. At least one of
// Err, Delay, Hold and Corrupt must be set.
type Rule struct {
	// Ops are the operations the rule applies to; empty means all.
	Ops []Op
	// Match, when set, must return true for the rule to apply to a call.
	// It is called with the Faults locked, so it must not call them.
	Match func(Call) bool
	// Skip is the number of matching calls let through before the first
	// fault.
	Skip int
	// Times is the number of calls faulted; zero means every matching call
	// until the rule is removed.
	Times int

	// Err is returned instead of calling the wrapped backend.
	Err error
	// Delay is slept before the call proceeds (or fails).
	Delay time.Duration
	// Hold, when set, blocks the call until it is closed.
	Hold <-chan struct{}
	// Corrupt, for Get, GetLocked, Load and the current records of a
	// CompareAndSwap that did not match, is given the record the wrapped
	// backend returned (nil for none) and returns the bytes the caller gets
	// instead. It must not modify its argument. It is ignored for other
	// operations and when Err is set.
	Corrupt func(record []byte) []byte
}

// Garbage returns a Rule.Corrupt that replaces every record with a copy of
// b, whether or not a record was there.
func Garbage(b []byte) func([]byte) []byte {
	b = append([]byte(nil), b...)
	return func([]byte) []byte { return append([]byte(nil), b...) }
}

// ID names a rule added to a Faults, for Remove.
type ID int

type armed struct {
	Rule
	id    ID
	ops   uint32 // bit op set for each op in Ops; all bits when Ops is empty
	seen  int    // matching calls so far
	fired int    // faulted calls so far
}

// Faults controls one wrapper: the rules in force and the calls seen.
type Faults struct {
	mu     sync.Mutex // guards rules and next
	rules  []*armed
	next   ID
	calls  [numOps]atomic.Int64
	faults atomic.Int64
}

// Add puts r in force after the rules already there and returns its ID. It
// returns an error, and adds nothing, when r has no effect or names an
// unknown operation.
func (f *Faults) Add(r Rule) (ID, error) {
	if r.Err == nil && r.Delay <= 0 && r.Hold == nil && r.Corrupt == nil {
		return 0, errors.New("sluice/backend/faulty: rule has no effect: set Err, Delay, Hold or Corrupt")
	}
	if r.Skip < 0 || r.Times < 0 {
		return 0, fmt.Errorf("sluice/backend/faulty: negative Skip (%d) or Times (%d)", r.Skip, r.Times)
	}
	a := &armed{Rule: r, ops: 1<<numOps - 1}
	if len(r.Ops) > 0 {
		a.ops = 0
		for _, op := range r.Ops {
			if op == 0 || op >= numOps {
				return 0, fmt.Errorf("sluice/backend/faulty: unknown operation %v", op)
			}
			a.ops |= 1 << op
		}
	}
	a.Ops = append([]Op(nil), r.Ops...)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	a.id = f.next
	f.rules = append(f.rules, a)
	return a.id, nil
}

// Remove takes the rule id out of force; calls already faulted by it finish
// as they started. Removing an unknown or removed rule does nothing.
func (f *Faults) Remove(id ID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, a := range f.rules {
		if a.id == id {
			f.rules = append(f.rules[:i:i], f.rules[i+1:]...)
			return
		}
	}
}

// Clear takes every rule out of force.
func (f *Faults) Clear() {
	f.mu.Lock()
	f.rules = nil
	f.mu.Unlock()
}

// Calls returns how many calls of op reached the wrapper, faulted or not.
func (f *Faults) Calls(op Op) int {
	if op == 0 || op >= numOps {
		return 0
	}
	return int(f.calls[op].Load())
}

// Faulted returns how many calls a rule has faulted.
func (f *Faults) Faulted() int { return int(f.faults.Load()) }

// effect is what the rules in force do to one call.
type effect struct {
	err     error
	delay   time.Duration
	holds   []<-chan struct{}
	corrupt []func([]byte) []byte
}

// enter counts a call, applies the rules' waits and returns their error, or
// the corruptions to apply to the call's result.
func (f *Faults) enter(c Call) (corrupt []func([]byte) []byte, err error) {
	c.N = int(f.calls[c.Op].Add(1))
	var e effect
	hit := false
	f.mu.Lock()
	for _, a := range f.rules {
		if a.ops&(1<<c.Op) == 0 || (a.Match != nil && !a.Match(c)) {
			continue
		}
		a.seen++
		if a.seen <= a.Skip || (a.Times > 0 && a.fired >= a.Times) {
			continue
		}
		a.fired++
		hit = true
		if e.err == nil {
			e.err = a.Err
		}
		e.delay += a.Delay
		if a.Hold != nil {
			e.holds = append(e.holds, a.Hold)
		}
		if a.Corrupt != nil {
			e.corrupt = append(e.corrupt, a.Corrupt)
		}
	}
	f.mu.Unlock()
	if !hit {
		return nil, nil
	}
	f.faults.Add(1)
	for _, h := range e.holds {
		<-h
	}
	if e.delay > 0 {
		time.Sleep(e.delay)
	}
	if e.err != nil {
		return nil, fmt.Errorf("%v: %w", c.Op, e.err)
	}
	return e.corrupt, nil
}

func corrupted(fs []func([]byte) []byte, v []byte) []byte {
	for _, fn := range fs {
		v = fn(v)
	}
	return v
}
