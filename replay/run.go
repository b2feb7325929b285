package replay

import (
	"cmp"
	"slices"
)

// Result is a replay's outcome: the logs read, the report of the
// configuration, and with a second configuration its report and the
// comparison.
type Result struct {
	// Files are the counts of each log file, in the order given.
	Files []FileStats
	// BadLines are the first few lines that did not parse, of all files.
	BadLines []BadLine
	// Reorder is the reorder window the files were read with.
	Reorder int64
	// Report is the configuration's report.
	Report *Report
	// Against is the second configuration's report, or nil.
	Against *Report
	// Diff compares the two, or is nil.
	Diff *Diff
}

// Diff compares the decisions of two configurations over the same
// requests.
type Diff struct {
	// BothDenied counts requests both configurations deny; OnlyA those
	// only the first denies, OnlyB only the second.
	BothDenied, OnlyA, OnlyB int64
	// CallersOnlyA are the callers denied by the first configuration on
	// requests the second allows, most such requests first; CallersOnlyB
	// the other way round. Each is named by its key under the denying
	// rule.
	CallersOnlyA, CallersOnlyB []DiffCaller
	// AffectedOnlyA and AffectedOnlyB count those callers in all.
	AffectedOnlyA, AffectedOnlyB int
}

// DiffCaller is a caller denied by one configuration and not the other.
type DiffCaller struct {
	Rule     string
	Key      string
	Requests int64 // the requests one denied and the other allowed
}

// RunOptions configure Run.
type RunOptions struct {
	// Share is the share of callers a suggested limit leaves never
	// denied; zero means 0.99.
	Share float64
	// Top is how many callers each list shows; zero means 10.
	Top int
	// Progress, when set, is called every few thousand requests and at
	// the end with the bytes of the files read so far.
	Progress func(read int64)
	// OnDecision, when set, is told each request's outcome under the
	// first configuration (and under the second, or a zero Outcome).
	OnDecision func(rec *Record, a, b Outcome)
}

// Run replays the sources, merged in time order, through a (and b, when
// not nil), and reports. It closes neither.
func Run(sources []*Source, a, b *Replayer, opts RunOptions) *Result {
	if opts.Top <= 0 {
		opts.Top = 10
	}
	heads := make([]Record, len(sources))
	live := make([]bool, len(sources))
	for i, s := range sources {
		live[i] = s.Next(&heads[i])
	}
	type pair struct{ rule, key string }
	var onlyA, onlyB map[pair]int64
	var diff *Diff
	if b != nil {
		diff = &Diff{}
		onlyA, onlyB = map[pair]int64{}, map[pair]int64{}
	}
	progress := func() {
		if opts.Progress != nil {
			var n int64
			for _, s := range sources {
				n += s.BytesRead()
			}
			opts.Progress(n)
		}
	}
	var n int64
	var rec Record
	for {
		pick := -1
		for i := range sources {
			if live[i] && (pick < 0 || heads[i].Time < heads[pick].Time) {
				pick = i
			}
		}
		if pick < 0 {
			break
		}
		rec = heads[pick]
		live[pick] = sources[pick].Next(&heads[pick])
		oa := a.Decide(&rec)
		var ob Outcome
		if b != nil {
			ob = b.Decide(&rec)
			da, db := oa.Status == Denied, ob.Status == Denied
			switch {
			case da && db:
				diff.BothDenied++
			case da:
				diff.OnlyA++
				onlyA[pair{oa.Rule.Name(), oa.Key}]++
			case db:
				diff.OnlyB++
				onlyB[pair{ob.Rule.Name(), ob.Key}]++
			}
		}
		if opts.OnDecision != nil {
			opts.OnDecision(&rec, oa, ob)
		}
		if n++; n%4096 == 0 {
			progress()
		}
	}
	progress()
	res := &Result{Report: a.Report(opts.Share, opts.Top)}
	for _, s := range sources {
		res.Files = append(res.Files, s.Stats())
		res.BadLines = append(res.BadLines, s.BadLines()...)
		res.Reorder = int64(s.opts.Reorder)
	}
	if b != nil {
		res.Against = b.Report(opts.Share, opts.Top)
		list := func(m map[pair]int64) []DiffCaller {
			out := make([]DiffCaller, 0, len(m))
			for p, n := range m {
				out = append(out, DiffCaller{Rule: p.rule, Key: p.key, Requests: n})
			}
			slices.SortFunc(out, func(x, y DiffCaller) int {
				if c := cmp.Compare(y.Requests, x.Requests); c != 0 {
					return c
				}
				if c := cmp.Compare(x.Rule, y.Rule); c != 0 {
					return c
				}
				return cmp.Compare(x.Key, y.Key)
			})
			return out
		}
		ca, cb := list(onlyA), list(onlyB)
		diff.AffectedOnlyA, diff.AffectedOnlyB = len(ca), len(cb)
		diff.CallersOnlyA, diff.CallersOnlyB = ca[:min(len(ca), opts.Top)], cb[:min(len(cb), opts.Top)]
		res.Diff = diff
	}
	return res
}
