// Package throttled keeps a live, bounded list of the callers being
// throttled: for each rule, the callers its decisions denied or left near
// their limit (sluice.Watcher), with how often and when, in a table of a
// fixed size per rule. A Tracker is what sluice serve's admin listener
// lists at GET /v1/throttled.
//
// A Tracker is fed by a door (sluice.DoorConfig.Watch, httplimit's
// Config.Watch) and sees that door's decisions only: across a fleet of
// gateways each process keeps its own list, of the callers it decided.
//
// A Tracker is safe for concurrent use.
package throttled

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/algo"
)

// DefaultPerRule is how many callers a Tracker keeps per rule when
// Options.PerRule is zero.
const DefaultPerRule = 256

// MaxPerRule is the most callers a Tracker keeps per rule.
const MaxPerRule = 1 << 16

// MaxKeyLen is the most bytes of a caller's key a Tracker keeps: a longer
// key (none of package identity's is, nor a level's key within its tenant,
// sluice.NestedKey of two of them: 529 bytes at most) is cut to it and
// marked, so that a client choosing its key cannot make an entry larger.
const MaxKeyLen = 640

// sample is how many entries an eviction looks at, from the table's hand.
const sample = 8

// Options configures a Tracker. The zero value means every default.
type Options struct {
	// PerRule is how many callers are kept per rule; zero means
	// DefaultPerRule. A full table replaces the entry least worth keeping
	// among a few it looks at (see Tracker).
	PerRule int
	// Now returns the time in Unix nanoseconds, as an engine's Clock does;
	// nil means the system clock.
	Now func() int64
}

// Tracker is a bounded, per-rule table of the callers a door's decisions
// denied or left near their limit (sluice.Near). Each entry is a caller's
// key with its denials and near-limit allows counted, when it was first
// and last seen, and until when its last denial holds it (now plus its
// Retry-After). A rule's table holds at most Options.PerRule entries: when
// full, a new caller replaces one of the next few entries from a moving
// hand, the one least worth keeping (not denied now before denied now,
// then seen longest ago), so a caller denied steadily stays and a flood of
// one-off keys cycles through the rest. Memory is bounded by the rules in
// force times PerRule times (MaxKeyLen plus about 100 bytes).
//
// Watch takes the rule's lock, and allocates only for a caller not in the
// table (its key, copied).
type Tracker struct {
	perRule int
	now     func() int64

	mu    sync.RWMutex      // guards rules (the map; each table has its own lock)
	rules map[string]*table // by rule name
}

// table is one rule's entries.
type table struct {
	mu   sync.Mutex     // guards everything below
	idx  map[string]int // key -> index in ents
	ents []entry        // at most max
	max  int
	hand int // where the next eviction starts looking
}

// entry is one caller of a rule's table.
type entry struct {
	key         string
	cut         bool // key was cut to MaxKeyLen
	denied      uint64
	near        uint64
	first, last int64 // Unix ns
	until       int64 // Unix ns: the last denial's now + RetryAfter
	remaining   int64 // after the last decision
	limit       int64
	shadow      bool
}

// New returns a Tracker. It fails when PerRule is negative or above
// MaxPerRule.
func New(o *Options) (*Tracker, error) {
	var opts Options
	if o != nil {
		opts = *o
	}
	switch {
	case opts.PerRule < 0 || opts.PerRule > MaxPerRule:
		return nil, errors.New("sluice/throttled: Options.PerRule: want 0 (the default, " + strconv.Itoa(DefaultPerRule) + ") to " + strconv.Itoa(MaxPerRule))
	case opts.PerRule == 0:
		opts.PerRule = DefaultPerRule
	}
	if opts.Now == nil {
		opts.Now = func() int64 { return time.Now().UnixNano() }
	}
	return &Tracker{perRule: opts.PerRule, now: opts.Now, rules: map[string]*table{}}, nil
}

var _ sluice.Watcher = (*Tracker)(nil)

// Watch records d, rule's decision for key (sluice.Watcher).
func (t *Tracker) Watch(rule *sluice.CompiledRule, key string, d algo.Decision) {
	now := t.now()
	tb := t.table(rule.Name())
	cut := len(key) > MaxKeyLen
	if cut {
		key = key[:MaxKeyLen]
	}
	tb.mu.Lock()
	i, ok := tb.idx[key]
	if !ok {
		i = tb.place(now)
		tb.ents[i] = entry{key: strings.Clone(key), cut: cut, first: now}
		tb.idx[tb.ents[i].key] = i
	}
	e := &tb.ents[i]
	e.last, e.remaining, e.limit, e.shadow = now, d.Remaining, d.Limit, rule.Shadow()
	if d.Allowed {
		e.near++
	} else {
		e.denied++
		e.until = now + int64(d.RetryAfter)
	}
	tb.mu.Unlock()
}

// table returns the table of the rule named name, made when it has none.
func (t *Tracker) table(name string) *table {
	t.mu.RLock()
	tb := t.rules[name]
	t.mu.RUnlock()
	if tb != nil {
		return tb
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if tb = t.rules[name]; tb == nil {
		tb = &table{idx: map[string]int{}, max: t.perRule}
		t.rules[name] = tb
	}
	return tb
}

// place returns the index a new caller takes: a free one while the table
// is not full, else that of the entry it replaces (whose key it forgets).
// tb.mu is held.
func (tb *table) place(now int64) int {
	if len(tb.ents) < tb.max {
		tb.ents = append(tb.ents, entry{})
		return len(tb.ents) - 1
	}
	victim := -1
	for j := range sample {
		i := (tb.hand + j) % len(tb.ents)
		if victim < 0 || worse(&tb.ents[i], &tb.ents[victim], now) {
			victim = i
		}
	}
	tb.hand = (tb.hand + sample) % len(tb.ents)
	delete(tb.idx, tb.ents[victim].key)
	return victim
}

// worse reports whether a is less worth keeping than b at now: not denied
// now where b is, else seen longer ago.
func worse(a, b *entry, now int64) bool {
	if da, db := a.until > now, b.until > now; da != db {
		return db
	}
	return a.last < b.last
}

// Keep forgets the tables of the rules not named in names: what a program
// calls when a reload puts other rules in force, so that a rule removed
// costs nothing.
func (t *Tracker) Keep(names []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name := range t.rules {
		if !slices.Contains(names, name) {
			delete(t.rules, name)
		}
	}
}

// Caller is one caller of a rule's table, as List returns it.
type Caller struct {
	// Rule is the rule's name, Key the caller's key under it (cut to
	// MaxKeyLen bytes when Cut).
	Rule string
	Key  string
	Cut  bool
	// Shadow reports a shadow rule: its denials let the request pass.
	Shadow bool
	// DeniedNow reports that the caller's last denial still holds: the
	// same request would be denied until Until.
	DeniedNow bool
	Until     time.Time
	// Denied counts the caller's denials under the rule, Near its
	// near-limit allows, since it took its entry.
	Denied, Near uint64
	// Remaining and Limit are the last decision's.
	Remaining, Limit int64
	// First and Last are when the caller was first and last seen since it
	// took its entry.
	First, Last time.Time
}

// Page is one page of List.
type Page struct {
	// Callers are the page's callers: those denied now first, the most
	// denials first, then the least remaining; the key breaks ties.
	Callers []Caller
	// Total is the callers of the list the page is cut from.
	Total int
	// Next is the cursor of the next page, "" after the last.
	Next string
}

// ErrCursor is returned by List for a cursor it did not give.
var ErrCursor = errors.New("sluice/throttled: bad cursor: want the next cursor of a previous page")

// List returns a page of at most n callers (n at least 1) of the rule
// named rule, or of every rule when rule is empty, starting at cursor (""
// for the first page; a page's Next for the one after it). The list is
// taken anew for each page, in its order: a caller that moves between two
// pages may be seen twice or not at all, as in any live listing.
func (t *Tracker) List(rule string, n int, cursor string) (Page, error) {
	off := 0
	if cursor != "" {
		var err error
		if off, err = strconv.Atoi(cursor); err != nil || off < 0 {
			return Page{}, ErrCursor
		}
	}
	now := t.now()
	var all []Caller
	t.mu.RLock()
	tables := make(map[string]*table, len(t.rules))
	for name, tb := range t.rules {
		if rule == "" || name == rule {
			tables[name] = tb
		}
	}
	t.mu.RUnlock()
	for name, tb := range tables {
		tb.mu.Lock()
		for _, e := range tb.ents {
			all = append(all, Caller{Rule: name, Key: e.key, Cut: e.cut, Shadow: e.shadow,
				DeniedNow: e.until > now, Until: time.Unix(0, e.until), Denied: e.denied, Near: e.near,
				Remaining: e.remaining, Limit: e.limit, First: time.Unix(0, e.first), Last: time.Unix(0, e.last)})
		}
		tb.mu.Unlock()
	}
	slices.SortFunc(all, func(a, b Caller) int {
		switch {
		case a.DeniedNow != b.DeniedNow:
			if a.DeniedNow {
				return -1
			}
			return 1
		case a.Denied != b.Denied:
			if a.Denied > b.Denied {
				return -1
			}
			return 1
		case a.Remaining != b.Remaining:
			if a.Remaining < b.Remaining {
				return -1
			}
			return 1
		case a.Rule != b.Rule:
			return strings.Compare(a.Rule, b.Rule)
		}
		return strings.Compare(a.Key, b.Key)
	})
	p := Page{Total: len(all)}
	if off >= len(all) {
		return p, nil
	}
	end := min(off+max(n, 1), len(all))
	p.Callers = all[off:end]
	if end < len(all) {
		p.Next = strconv.Itoa(end)
	}
	return p, nil
}
