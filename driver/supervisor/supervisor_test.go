package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/internal/atomicfile"
	"github.com/llmgw/llmgw/internal/testing/fakeclock"
)

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestOpenFIFOIsSafe(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "task.stdout.fifo")
	mkfifo(t, fifo)
	reg := filepath.Join(dir, "regular")
	if err := os.WriteFile(reg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.fifo")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}

	// No reader: ENXIO, so the caller retries later instead of blocking.
	if _, err := OpenFIFO(fifo); !errors.Is(err, syscall.ENXIO) {
		t.Errorf("open FIFO without reader: got %v, want ENXIO", err)
	}
	r, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f, err := OpenFIFO(fifo)
	if err != nil {
		t.Fatalf("open FIFO with reader: %v", err)
	}
	f.Close()
	// A symlink, even to a FIFO, is refused (O_NOFOLLOW).
	if _, err := OpenFIFO(link); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("open symlink: got %v, want ELOOP", err)
	}
	// A regular file is refused.
	if _, err := OpenFIFO(reg); !errors.Is(err, ErrNotFIFO) {
		t.Errorf("open regular file: got %v, want ErrNotFIFO", err)
	}
	// Nomad passes /dev/null when a task's logs are disabled.
	if f, err := OpenFIFO(os.DevNull); err != nil {
		t.Errorf("open /dev/null: %v", err)
	} else {
		f.Close()
	}
}

// TestSinkReopensWhenReaderGoesAway: the reader of a log FIFO goes away
// (a Nomad client restart) and a new one comes; the sink keeps what was
// written meanwhile and delivers it to the new reader.
func TestSinkReopensWhenReaderGoesAway(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.fifo")
	mkfifo(t, path)
	var problems []string
	s := NewSink(path, func(err error) { problems = append(problems, err.Error()) })
	clock := fakeclock.New(time.Unix(1000, 0))
	s.now = clock.Now

	// Before any reader: kept.
	_, _ = s.Write([]byte("early\n"))
	r1, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	_, _ = s.Write([]byte("one\n"))
	if got := readAvailable(t, r1); got != "early\none\n" {
		t.Errorf("first reader got %q", got)
	}
	r1.Close()
	_, _ = s.Write([]byte("lost-reader\n")) // EPIPE: kept for the next reader
	clock.Advance(2 * time.Second)
	r2, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	_, _ = s.Write([]byte("two\n"))
	if got := readAvailable(t, r2); got != "lost-reader\ntwo\n" {
		t.Errorf("second reader got %q", got)
	}
	if len(problems) == 0 || !strings.Contains(problems[0], "went away") {
		t.Errorf("problems %v, want the reader going away noted", problems)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}

func readAvailable(t *testing.T, f *os.File) string {
	t.Helper()
	var out []byte
	buf := make([]byte, 4096)
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if err := f.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		n, err := f.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil && len(out) > 0 {
			break
		}
	}
	return string(out)
}

func TestSinkBoundsPending(t *testing.T) {
	s := NewSink(filepath.Join(t.TempDir(), "nobody-reads"), nil)
	_, _ = s.Write(make([]byte, maxPending+100))
	if len(s.pending) != maxPending || s.dropped != 100 {
		t.Errorf("pending %d dropped %d, want %d and 100", len(s.pending), s.dropped, maxPending)
	}
}

func TestLinesTailAndProgress(t *testing.T) {
	var lines []string
	ls := &lineSplitter{line: func(s string) { lines = append(lines, s) }}
	ls.Write([]byte("a\nLoading safetensors checkpoint shards:  0% Completed | 0/4\rLoading safetensors checkpoint shards:  25% Completed | 1/4\r"))
	ls.Write([]byte("Loading safetensors checkpoint shards:  50% Completed | 2/4\nLoading safetensors checkpoint shards:  50% Completed | 2/4\nlast"))
	ls.Flush()
	var events []string
	pt := &progressTracker{last: -1, report: func(m string, _ map[string]string) { events = append(events, m) }}
	tl := &tail{n: 2}
	for _, l := range lines {
		pt.line(l)
		tl.add(l)
	}
	want := []string{
		"Loading safetensors checkpoint shards: 0% (0/4)",
		"Loading safetensors checkpoint shards: 25% (1/4)",
		"Loading safetensors checkpoint shards: 50% (2/4)",
	}
	if diff := cmp.Diff(want, events); diff != "" {
		t.Errorf("progress events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"Loading safetensors checkpoint shards:  50% Completed | 2/4", "last"}, tl.get()); diff != "" {
		t.Errorf("tail (-want +got):\n%s", diff)
	}
}

func TestParseOOMKills(t *testing.T) {
	p := filepath.Join(t.TempDir(), "memory.events")
	if err := os.WriteFile(p, []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := parseOOMKills(p)
	if err != nil || n != 1 {
		t.Errorf("got %d, %v; want 1", n, err)
	}
	if err := os.WriteFile(p, []byte("low 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parseOOMKills(p); err == nil {
		t.Error("no error for memory.events without oom_kill")
	}
}

func TestStateFiles(t *testing.T) {
	dir := t.TempDir()
	if _, ok, err := ReadExit(dir); ok || err != nil {
		t.Fatalf("ReadExit on empty dir: %v %v", ok, err)
	}
	want := Exit{ExitCode: 1, Signal: 0, Tail: []string{"boom"}, At: time.Unix(5, 0).UTC()}
	if err := atomicfile.WriteJSON(filepath.Join(dir, ExitFile), want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := ReadExit(dir)
	if err != nil || !ok {
		t.Fatalf("ReadExit: %v %v", ok, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("exit record (-want +got):\n%s", diff)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
	if err := atomicfile.WriteJSON(filepath.Join(dir, SpecFile), Spec{Version: 99}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSpec(dir); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Errorf("ReadSpec of a future version: %v", err)
	}
}
