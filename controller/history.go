package controller

import (
	"time"

	"github.com/llmgw/llmgw/controllerapi"
)

// History: every signal round appends, per autoscaled model, one point of
// its demand and replica counts to a ring buffer in memory, an hour long
// (HistorySpan ÷ autoscale.interval points): what the console draws. It is
// not stored: a restarted controller starts with none, and a standby keeps
// its own from its own rounds.

// HistorySpan is how far back the history goes.
const HistorySpan = time.Hour

// Each model's ring holds HistorySpan ÷ autoscale.interval points, at
// least minHistoryPoints (rounds may come faster than the interval: one
// per interval, and tests run their own) and at most maxHistoryPoints.
const (
	minHistoryPoints = 120
	maxHistoryPoints = 3600
)

// ring is a fixed-size ring of points, oldest first when read.
type ring struct {
	buf  []controllerapi.HistoryPoint
	next int
	full bool
}

func newRing(n int) *ring { return &ring{buf: make([]controllerapi.HistoryPoint, n)} }

func (r *ring) add(p controllerapi.HistoryPoint) {
	r.buf[r.next] = p
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// since returns the points at or after from, oldest first.
func (r *ring) since(from time.Time) []controllerapi.HistoryPoint {
	var out []controllerapi.HistoryPoint
	if r.full {
		out = append(out, r.buf[r.next:]...)
	}
	out = append(out, r.buf[:r.next]...)
	i := 0
	for i < len(out) && out[i].At.Before(from) {
		i++
	}
	return out[i:]
}

func historyCap(interval time.Duration) int {
	if interval <= 0 {
		interval = time.Second
	}
	return min(max(int(HistorySpan/interval)+2, minHistoryPoints), maxHistoryPoints)
}

// recordHistory appends a round to each model's ring.
func (s *scaleState) recordHistory(at time.Time, signals map[string]controllerapi.ModelSignals, models []controllerapi.ModelView, interval time.Duration) {
	counts := map[string]controllerapi.ModelView{}
	for _, m := range models {
		counts[m.Name] = m
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, sig := range signals {
		r := s.history[name]
		if r == nil || len(r.buf) != historyCap(interval) {
			r = newRing(historyCap(interval))
			s.history[name] = r
		}
		mv := counts[name]
		r.add(controllerapi.HistoryPoint{
			At: at, Outstanding: sig.Outstanding.Value, Queued: sig.Queued.Value, Arrivals: sig.Arrivals.Value,
			TTFTP90: sig.TTFTP90.Value, Waiting: sig.Waiting.Value, KVCache: sig.KVCache.Value,
			Wanted: mv.Wanted, Has: mv.Has, Serving: mv.Serving,
		})
	}
	for name := range s.history {
		if _, ok := signals[name]; !ok {
			delete(s.history, name)
		}
	}
}

// since returns a model's points at or after from; ok is false when the
// model has none.
func (s *scaleState) since(model string, from time.Time) ([]controllerapi.HistoryPoint, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.history[model]
	if r == nil {
		return nil, false
	}
	return r.since(from), true
}

// History returns a model's points of the last HistorySpan; ok is false
// when the model has none (it does not autoscale, or no round ran yet).
func (c *Controller) History(model string) (controllerapi.HistoryView, bool) {
	interval := c.cfg.AutoscaleSettings().Interval
	now := c.now()
	pts, ok := c.scale.since(model, now.Add(-HistorySpan))
	if pts == nil {
		pts = []controllerapi.HistoryPoint{}
	}
	return controllerapi.HistoryView{Model: model, At: now, Interval: interval.Seconds(), Span: HistorySpan.Seconds(), Points: pts}, ok
}
