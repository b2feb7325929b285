package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluice-go/sluice/bench/internal/rlsproc"
)

// report gathers the runs and writes them as markdown.
type report struct {
	o            options
	began, ended time.Time
	commit       string
	redisVersion string
	calls        []call
	sluice       []*sluiceRun
	rls          []*rlsRun
	violations   []string
	faulted      *fleet
}

// orgAdmitted is what the upstream received of org in r.
func (r *sluiceRun) orgAdmitted(org int) int64 {
	var s int64
	for _, n := range r.upstream[org] {
		s += n
	}
	return s
}

func (r *sluiceRun) userSpentSum(org int) int64 {
	var s int64
	for _, n := range r.userSpnt[org] {
		s += n
	}
	return s
}

// bounds returns the most admitted of an organisation and of a user, and
// how many of each were over their limit, from admitted[org][user].
func bounds(o options, admitted func(org, user int) int64) (maxOrg, maxUser int64, orgsOver, usersOver int) {
	for org := range o.orgs {
		var sum int64
		for u := range o.users {
			n := admitted(org, u)
			sum += n
			maxUser = max(maxUser, n)
			if n > int64(o.userLimit) {
				usersOver++
			}
		}
		maxOrg = max(maxOrg, sum)
		if sum > int64(o.orgLimit) {
			orgsOver++
		}
	}
	return
}

// check records the bounds a closed fleet must hold.
func (rep *report) check() {
	o := rep.o
	for _, r := range rep.sluice {
		if r.policy != "closed" {
			continue
		}
		_, _, orgsOver, usersOver := bounds(o, func(org, u int) int64 { return r.upstream[org][u] })
		if r.fault != "crash-node" && (orgsOver > 0 || usersOver > 0) {
			rep.violations = append(rep.violations, fmt.Sprintf("%s: %d organisations and %d users admitted over their limit", r.name, orgsOver, usersOver))
		}
		if r.fault == "crash-node" {
			continue // the node came back empty: reported, not held
		}
		for org := range o.orgs {
			if r.orgSpent[org] != r.userSpentSum(org) {
				rep.violations = append(rep.violations, fmt.Sprintf("%s: %s spent %d, its users %d", r.name, orgName(org), r.orgSpent[org], r.userSpentSum(org)))
			}
			if a := r.orgAdmitted(org); r.fault == "" && r.orgSpent[org] != a {
				rep.violations = append(rep.violations, fmt.Sprintf("%s: %s spent %d, the upstream received %d", r.name, orgName(org), r.orgSpent[org], a))
			}
		}
	}
}

func (rep *report) write(w io.Writer) {
	o := rep.o
	fmt.Fprintf(w, "## %s UTC, %s, commit %s\n\n", rep.began.UTC().Format("2006-01-02 15:04"), host(), rep.commit)
	fmt.Fprintf(w, "%d calls a run from %d callers, %d organisations × %d users (seed %d), org pool %d a day, user %d a day within it; %d CPU burners; %s; envoyproxy/ratelimit %s. %.0f s in all.\n\n",
		o.calls, o.callers, o.orgs, o.users, o.seed, o.orgLimit, o.userLimit, o.burners, rep.redisVersion, rlsproc.EnvoyVersion, rep.ended.Sub(rep.began).Seconds())

	fmt.Fprintln(w, "| run | admitted | 429 / OVER_LIMIT | 503 / UNAVAILABLE | no answer | calls/s | most of an org (limit) | most of a user (limit) | over limit: orgs, users | org pool spent − admitted | orgs whose spent ≠ Σ users' spent | Redis scripts / call | Redis commands / call |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rep.sluice {
		maxOrg, maxUser, orgsOver, usersOver := bounds(o, func(org, u int) int64 { return r.upstream[org][u] })
		var adm, eaten int64
		disagree := 0
		for org := range o.orgs {
			a := r.orgAdmitted(org)
			adm += a
			eaten += r.orgSpent[org] - a
			if r.orgSpent[org] != r.userSpentSum(org) {
				disagree++
			}
		}
		reached := r.t.total(admitted) + r.t.total(denied) + r.t.total(unavailable)
		scripts, cmds := "—", "—"
		if r.fault != "crash-node" && reached > 0 {
			scripts = fmt.Sprintf("%.2f", float64(r.scripts)/float64(reached))
			cmds = fmt.Sprintf("%.2f", float64(r.commands)/float64(reached))
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %.0f | %d (%d) | %d (%d) | %d, %d | %d | %d | %s | %s |\n",
			sluiceLabel(r), adm, r.t.total(denied), r.t.total(unavailable), r.t.total(failed),
			float64(len(rep.calls))/r.took.Seconds(), maxOrg, o.orgLimit, maxUser, o.userLimit, orgsOver, usersOver, eaten, disagree, scripts, cmds)
	}
	for _, r := range rep.rls {
		maxOrg, maxUser, orgsOver, usersOver := bounds(o, func(org, u int) int64 { return r.t.n[org][u][admitted] })
		eaten := "—"
		if r.orgCount != nil {
			var e int64
			for org := range o.orgs {
				e += min(r.orgCount[org], int64(o.orgLimit)) - r.t.org(org, admitted)
			}
			eaten = fmt.Sprint(e)
		}
		n := float64(len(rep.calls))
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %.0f | %d (%d) | %d (%d) | %d, %d | %s | — | %.2f | %.2f |\n",
			rlsLabel(r.name), r.t.total(admitted), r.t.total(denied), r.t.total(unavailable), r.t.total(failed),
			n/r.took.Seconds(), maxOrg, o.orgLimit, maxUser, o.userLimit, orgsOver, usersOver, eaten, float64(r.scripts)/n, float64(r.commands)/n)
	}
	fmt.Fprintln(w)

	// Per organisation: the steady sluice run beside envoy's.
	var steady *sluiceRun
	for _, r := range rep.sluice {
		if r.name == "sluice" {
			steady = r
		}
	}
	fmt.Fprint(w, "| org | calls | sluice: admitted | sluice: org spent | sluice: 429")
	for _, r := range rep.rls {
		if r.orgCount != nil {
			fmt.Fprintf(w, " | %s: admitted | %s: org counter | %s: org pool spent − admitted", rlsLabel(r.name), rlsLabel(r.name), rlsLabel(r.name))
		}
	}
	fmt.Fprintln(w, " |")
	fmt.Fprint(w, "| --- | ---: | ---: | ---: | ---:")
	for _, r := range rep.rls {
		if r.orgCount != nil {
			fmt.Fprint(w, " | ---: | ---: | ---:")
		}
	}
	fmt.Fprintln(w, " |")
	perOrg := make([]int64, o.orgs)
	for _, c := range rep.calls {
		perOrg[c.org]++
	}
	for org := range o.orgs {
		fmt.Fprintf(w, "| %s | %d", orgName(org), perOrg[org])
		if steady != nil {
			fmt.Fprintf(w, " | %d | %d | %d", steady.orgAdmitted(org), steady.orgSpent[org], steady.t.org(org, denied))
		} else {
			fmt.Fprint(w, " | — | — | —")
		}
		for _, r := range rep.rls {
			if r.orgCount != nil {
				a := r.t.org(org, admitted)
				fmt.Fprintf(w, " | %d | %d | %d", a, r.orgCount[org], min(r.orgCount[org], int64(o.orgLimit))-a)
			}
		}
		fmt.Fprintln(w, " |")
	}
	fmt.Fprintln(w)
	if f := rep.faulted; f != nil {
		var names []string
		for _, org := range f.onNode {
			names = append(names, orgName(org))
		}
		fmt.Fprintf(w, "The node faults strike node %d of 3, which holds the slots of %s.\n", f.faulted+1, strings.Join(names, ", "))
	}
	for _, r := range rep.sluice {
		if r.restart > 0 {
			fmt.Fprintf(w, "The killed gateway listened again %v after its restart began.\n", r.restart.Round(time.Millisecond))
		}
	}
	if len(rep.violations) > 0 {
		fmt.Fprintln(w, "\n**Bounds violated under on_store_error: closed:**")
		for _, v := range rep.violations {
			fmt.Fprintln(w, "- "+v)
		}
	} else {
		fmt.Fprintln(w, "Under on_store_error: closed (the node crash aside) every organisation and user stayed within its limit at the upstream, and every organisation's count equals the sum of its users' (and, without faults, what the upstream received).")
	}
}

func sluiceLabel(r *sluiceRun) string {
	switch r.fault {
	case "kill-gateway":
		return "3 × sluice serve, Cluster, closed, a gateway kill -9'd and restarted"
	case "crash-node":
		return fmt.Sprintf("3 × sluice serve, Cluster, %s, a node kill -9'd 2 s and restarted empty", r.policy)
	case "pause-node":
		return fmt.Sprintf("3 × sluice serve, Cluster, %s, a node SIGSTOPped 2 s", r.policy)
	}
	return fmt.Sprintf("3 × sluice serve, 3-node Cluster, %s", r.policy)
}

func rlsLabel(name string) string {
	switch name {
	case "envoy":
		return "envoyproxy/ratelimit"
	case "envoy-stop-increment":
		return "envoyproxy/ratelimit, STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"
	case "sluice-rls":
		return "sluice rls, Redis"
	}
	return name
}
