package replay

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"strings"
	"testing"
	"time"
)

// line writes a combined-format line at second s past 10:00 for path.
func line(s int, path string) string {
	t := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC).Add(time.Duration(s) * time.Second)
	return fmt.Sprintf("192.0.2.1 - - [%s] \"GET %s HTTP/1.1\" 200 5 \"-\" \"ua\"\n", t.Format("02/Jan/2006:15:04:05 -0700"), path)
}

func drain(s *Source) (paths []string, times []int64) {
	var rec Record
	for s.Next(&rec) {
		paths = append(paths, rec.Path)
		times = append(times, rec.Time)
	}
	return paths, times
}

// Lines out of order within the window are decided in time order (lines
// of one time in file order); a line older than the last one decided is
// decided at that one's time and counted late.
func TestSourceReorders(t *testing.T) {
	log := line(0, "/a") + line(5, "/c") + line(2, "/b") + line(5, "/d") + line(30, "/e") +
		line(29, "/f") + line(3, "/late") + line(31, "/g")
	s, err := NewSource("x.log", strings.NewReader(log), SourceOptions{Reorder: 10 * time.Second}, 5)
	if err != nil {
		t.Fatal(err)
	}
	paths, times := drain(s)
	if got, want := strings.Join(paths, " "), "/a /b /c /d /late /f /e /g"; got != want {
		t.Errorf("order %s, want %s", got, want)
	}
	for i := 1; i < len(times); i++ {
		if times[i] < times[i-1] {
			t.Errorf("time %d steps back", i)
		}
	}
	// /e (second 30) released /a to /d; /late (second 3) came after, and
	// is decided at /d's time, second 5, before /f.
	if want := times[3]; times[4] != want {
		t.Errorf("the late line was decided at %d, want %d", times[4], want)
	}
	st := s.Stats()
	if st.Reordered != 2 || st.Late != 1 || st.MaxLate != 2*time.Second || st.Lines != 8 || st.Bad != 0 {
		t.Errorf("stats %+v, want 2 reordered (/b, /f), 1 late by 2s, 8 lines", st)
	}
}

// Bad lines are counted, the first few kept with their line numbers, and
// never stop the file; blank lines are not lines.
func TestSourceBadLines(t *testing.T) {
	log := line(0, "/a") + "garbage\n\n" + strings.Repeat("x", maxLine+10) + "\n" + line(1, "/b") + "also bad\r\n" + line(2, "/c")
	s, err := NewSource("x.log", strings.NewReader(log), SourceOptions{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	paths, _ := drain(s)
	if got := strings.Join(paths, " "); got != "/a /b /c" {
		t.Errorf("requests %s, want /a /b /c", got)
	}
	st := s.Stats()
	if st.Bad != 3 || st.Lines != 6 {
		t.Errorf("stats %+v, want 3 bad of 6 lines", st)
	}
	bad := s.BadLines()
	if len(bad) != 2 || bad[0].Line != 2 || bad[1].Line != 4 || bad[0].Text != "garbage" || !strings.Contains(bad[1].Err, "longer than") {
		t.Errorf("bad lines %+v, want lines 2 and 4", bad)
	}
}

// A gzip file is read as gzip by its first bytes, whatever its name,
// concatenated members included; a truncated one ends with its error
// noted, the lines before it read.
func TestSourceGzip(t *testing.T) {
	var z bytes.Buffer
	for _, part := range []string{line(0, "/a") + line(1, "/b"), line(2, "/c")} {
		w := gzip.NewWriter(&z)
		w.Write([]byte(part))
		w.Close()
	}
	s, err := NewSource("access.log", bytes.NewReader(z.Bytes()), SourceOptions{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	paths, _ := drain(s)
	if got := strings.Join(paths, " "); got != "/a /b /c" || !s.Stats().Gzip || s.Stats().Err != nil {
		t.Errorf("read %q, stats %+v", got, s.Stats())
	}
	s, err = NewSource("access.log", bytes.NewReader(z.Bytes()[:z.Len()-12]), SourceOptions{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	paths, _ = drain(s)
	if len(paths) < 2 || s.Stats().Err == nil {
		t.Errorf("truncated: read %v, err %v; want the first member's lines and an error", paths, s.Stats().Err)
	}
}

// FormatAuto tells JSON lines from the combined format by the first byte.
func TestSourceAutoFormat(t *testing.T) {
	s, err := NewSource("api.log", strings.NewReader("\n  {\"time\":1796032800,\"remote_addr\":\"192.0.2.1\",\"method\":\"GET\",\"uri\":\"/j\"}\n"), SourceOptions{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	paths, _ := drain(s)
	if s.Stats().Format != FormatJSON || strings.Join(paths, "") != "/j" {
		t.Errorf("format %s, read %v", s.Stats().Format, paths)
	}
}
