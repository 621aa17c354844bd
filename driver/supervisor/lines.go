package supervisor

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/llmgw/llmgw/engine"
)

// maxLine bounds one remembered line; longer ones are cut.
const maxLine = 2048

// lineSplitter turns chunks of output into lines, ending a line at \n or
// \r (progress bars redraw with \r).
type lineSplitter struct {
	cur  []byte
	line func(string)
}

func (l *lineSplitter) Write(p []byte) {
	for _, b := range p {
		if b == '\n' || b == '\r' {
			if len(l.cur) > 0 {
				l.line(string(l.cur))
				l.cur = l.cur[:0]
			}
			continue
		}
		if len(l.cur) < maxLine {
			l.cur = append(l.cur, b)
		}
	}
}

func (l *lineSplitter) Flush() {
	if len(l.cur) > 0 {
		l.line(string(l.cur))
		l.cur = l.cur[:0]
	}
}

// tail keeps the last n lines.
type tail struct {
	mu    sync.Mutex
	n     int
	lines []string
}

func (t *tail) add(s string) {
	if t.n <= 0 || strings.TrimSpace(s) == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, s)
	if len(t.lines) > t.n {
		t.lines = append([]string(nil), t.lines[len(t.lines)-t.n:]...)
	}
}

func (t *tail) get() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.lines...)
}

// progressTracker turns load-progress lines into events, one per quarter
// reached (0, 25, 50, 75, 100 %), however many workers print the same bar:
// Nomad keeps only a task's last few events.
type progressTracker struct {
	engine string // whose progress lines (see engine.ParseProgressFor)
	mu     sync.Mutex
	last   int // last quarter reported, -1 for none
	report func(msg string, annotations map[string]string)
}

// EventLinePrefix starts an output line of the driver's fetch (engine
// "fetch") that is a task event: the prefix, then an Event as JSON. Lines
// of other engines are never read as events.
const EventLinePrefix = "llmgw-event "

func (p *progressTracker) line(s string) {
	if p.engine == "fetch" {
		if js, ok := strings.CutPrefix(s, EventLinePrefix); ok {
			var ev Event
			if json.Unmarshal([]byte(js), &ev) == nil && ev.Message != "" {
				p.report(ev.Message, ev.Annotations)
			}
		}
		return
	}
	pr, ok := engine.ParseProgressFor(p.engine, s)
	if !ok {
		return
	}
	q := pr.Percent / 25
	p.mu.Lock()
	if q <= p.last {
		p.mu.Unlock()
		return
	}
	p.last = q
	p.mu.Unlock()
	msg := fmt.Sprintf("Loading %s: %d%%", pr.What, pr.Percent)
	if pr.Total > 0 {
		msg += fmt.Sprintf(" (%d/%d)", pr.Done, pr.Total)
	}
	p.report(msg, map[string]string{"progress_percent": strconv.Itoa(pr.Percent)})
}
