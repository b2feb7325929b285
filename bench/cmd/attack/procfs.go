package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-go/sluice/internal/loadgen/serveproc"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds returns the user and system CPU time process pid has used,
// in seconds, from /proc/PID/stat.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStat(string(data))
}

// parseStat returns the utime+stime of the text of a /proc/PID/stat file,
// in seconds.
func parseStat(s string) (float64, error) {
	// The command name is in parentheses and may hold spaces: count the
	// fields after its closing one (state is field 3, utime 14, stime 15).
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name", len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("stat: utime %q stime %q", f[11], f[12])
	}
	return float64(ut+st) / clockTicks, nil
}

// children returns the ids of pid's child processes (nginx's workers),
// from /proc/PID/task/PID/children.
func children(pid int) []int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var ids []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil {
			ids = append(ids, n)
		}
	}
	return ids
}

// procGroup is the processes whose memory and CPU one row reports: a
// server, and its workers (nginx) or its store (redis-server) besides.
type procGroup struct {
	pids     []int
	withKids bool // add each pid's children, read afresh at every sample
}

func (g procGroup) all() []int {
	ids := append([]int(nil), g.pids...)
	if g.withKids {
		for _, p := range g.pids {
			ids = append(ids, children(p)...)
		}
	}
	return ids
}

// usage is one reading of a group: resident memory summed over its
// processes, their peaks summed, and their CPU seconds.
type usage struct {
	rss, hwm int64
	cpu      float64
}

func (g procGroup) read() (usage, error) {
	var u usage
	for _, p := range g.all() {
		m, err := serveproc.ReadMemory(p)
		if err != nil {
			return u, err
		}
		c, err := cpuSeconds(p)
		if err != nil {
			return u, err
		}
		u.rss += m.RSS
		u.hwm += m.HWM
		u.cpu += c
	}
	return u, nil
}

// sampler reads a group every period until stopped, keeping the peak
// resident memory seen and the last reading.
type sampler struct {
	g    procGroup
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex // guards the fields below
	peak    int64
	last    usage
	lastErr error
	extra   []func() // run at each sample (the upstream's counters)
}

func startSampler(g procGroup, period time.Duration, extra ...func()) *sampler {
	s := &sampler{g: g, stop: make(chan struct{}), done: make(chan struct{}), extra: extra}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				s.sample()
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *sampler) sample() {
	u, err := s.g.read()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.extra {
		f()
	}
	if err != nil {
		s.lastErr = err
		return
	}
	s.last = u
	s.peak = max(s.peak, u.rss, u.hwm)
}

// now returns the last reading.
func (s *sampler) now() usage {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// finish stops the sampler and returns the peak resident memory (the
// largest sampled RSS or VmHWM) and the last reading.
func (s *sampler) finish() (peak int64, last usage) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak, s.last
}

// mb formats bytes as MB (10^6).
func mb(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/1e6) }
