package autoscale

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/llmgw/llmgw/facility"
)

// Signal is one reading of one signal.
type Signal struct {
	V float64
	// At is when the source measured it.
	At time.Time
	// OK is false when there is no reading: the source did not answer,
	// does not export the signal, or had nothing to measure (no engine
	// serving). Such a reading never counts as zero.
	OK bool
	// Why says, when not OK, what went wrong ("gateway gw-2: connection
	// refused"), for the decision's reason.
	Why string
}

// Reading returns a reading of v measured at at.
func Reading(v float64, at time.Time) Signal { return Signal{V: v, At: at, OK: true} }

// Missing returns a signal with no reading, and why.
func Missing(why string) Signal { return Signal{Why: why} }

// Sample is one round of readings of a model's signals.
type Sample struct {
	// At is when the round was taken.
	At time.Time
	// From the gateways, summed over them. Outstanding: requests in
	// flight or queued. Queued: requests held for want of a replica (the
	// scale-to-zero queue, or every replica at its limit). Arrivals:
	// requests per second arriving, over the interval before At. TTFT:
	// time to first token, p90, in seconds.
	Outstanding, Queued, Arrivals, TTFT Signal
	// From the engines of the serving replicas: requests waiting in the
	// engines' queues (summed), KV-cache use (mean, 0–1).
	Waiting, KVCache Signal
	// Serving is how many replicas served at At: the levels (KV cache,
	// TTFT) are spread over them.
	Serving int
}

// Rule is which rule decided. Its String is a stable label for metrics.
type Rule uint8

// The rules.
const (
	RuleHold     Rule = iota + 1 // the count is what the signal needs
	RuleUp                       // up, by the up window
	RulePanic                    // up, straight to what the panic window needs
	RuleDown                     // down, by the down window
	RuleWake                     // up from zero
	RuleIdle                     // down to zero: no arrivals for idle_after
	RuleMin                      // up to the policy's min
	RuleMax                      // down to the policy's max
	RuleNoSignal                 // holds: no reading of the target's signal yet
	RuleStale                    // holds: the target's signal is missing or stale
	RuleWait                     // holds: a change waits for a window (up window since the last change, down window since the last up, down window not covered)
)

var ruleNames = [...]string{
	RuleHold: "hold", RuleUp: "up", RulePanic: "panic", RuleDown: "down", RuleWake: "wake", RuleIdle: "idle",
	RuleMin: "min", RuleMax: "max", RuleNoSignal: "no_signal", RuleStale: "stale", RuleWait: "wait",
}

// Rules returns every rule.
func Rules() []Rule {
	out := make([]Rule, 0, len(ruleNames)-1)
	for r := RuleHold; int(r) < len(ruleNames); r++ {
		out = append(out, r)
	}
	return out
}

func (r Rule) String() string {
	if r > 0 && int(r) < len(ruleNames) {
		return ruleNames[r]
	}
	return "rule(" + strconv.Itoa(int(r)) + ")"
}

// Decision is what a model wants, and why.
type Decision struct {
	Current int // the slots it had
	Want    int
	Rule    Rule
	Reason  string
	// Needed is the replicas the up window's mean needs, and NeededDown
	// the most any time in the down window needed (both unrounded); -1
	// when unknown.
	Needed, NeededDown float64
}

// Changes reports whether the decision moves the count.
func (d Decision) Changes() bool { return d.Want != d.Current }

// Config bounds a Scaler.
type Config struct {
	// MaxAge is how old a reading may be at the decision and still count;
	// it is also the longest gap that still counts as continuous readings.
	// 0: DefaultMaxAge.
	MaxAge time.Duration
	// MaxSamples bounds the readings kept (the oldest go first; a down
	// window then reads as not covered, which only delays a scale down).
	// 0: DefaultMaxSamples.
	MaxSamples int
	// DownMargin is the share of the count a scale down leaves unused at
	// the down window's most: it goes to ceil(most ÷ (1 − DownMargin)),
	// so that the next rise of a few percent does not undo it. 0:
	// DefaultDownMargin; at most 0.5.
	DownMargin float64
}

// The defaults of Config.
const (
	DefaultMaxAge     = time.Minute
	DefaultMaxSamples = 20000
	DefaultDownMargin = 0.1
)

// point is one Sample as kept: its values, and which were fresh when taken.
type point struct {
	at                                         time.Time
	outstanding, queued, arrivals, ttft, waits float64
	kv                                         float64
	serving                                    int
	ok                                         [numSignals]bool
}

// The signals, indexes into point.ok.
const (
	sigOutstanding = iota
	sigQueued
	sigArrivals
	sigTTFT
	sigWaiting
	sigKV
	numSignals
)

// Scaler follows one model's signals and decides its count. Its zero value
// is not ready: use New. It is not safe for concurrent use.
type Scaler struct {
	cfg    Config
	points []point // oldest first
	latest Sample
	seen   bool

	// The count as last given to Decide, and when it last went up and
	// last changed.
	count            int
	counted          bool
	lastUp, lastMove time.Time

	// Arrivals: the start of the current unbroken run of fresh readings,
	// and the last reading that showed any demand.
	arrivalsSince, lastDemand time.Time
	lastArrivalAt             time.Time
}

// New returns a Scaler with no readings.
func New(cfg Config) *Scaler {
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.MaxSamples <= 0 {
		cfg.MaxSamples = DefaultMaxSamples
	}
	if !(cfg.DownMargin > 0) {
		cfg.DownMargin = DefaultDownMargin
	}
	cfg.DownMargin = min(cfg.DownMargin, 0.5)
	return &Scaler{cfg: cfg}
}

// fresh reports whether a reading counts at time now.
func (s *Scaler) fresh(sig Signal, now time.Time) bool {
	return sig.OK && !math.IsNaN(sig.V) && !math.IsInf(sig.V, 0) && sig.V >= 0 && now.Sub(sig.At) <= s.cfg.MaxAge
}

// Observe keeps a round of readings. Rounds should come in time order; one
// older than the latest is dropped.
func (s *Scaler) Observe(x Sample) {
	if s.seen && x.At.Before(s.latest.At) {
		return
	}
	s.latest, s.seen = x, true
	p := point{
		at: x.At, outstanding: x.Outstanding.V, queued: x.Queued.V, arrivals: x.Arrivals.V, ttft: x.TTFT.V,
		waits: x.Waiting.V, kv: x.KVCache.V, serving: x.Serving,
	}
	for i, sig := range [numSignals]Signal{x.Outstanding, x.Queued, x.Arrivals, x.TTFT, x.Waiting, x.KVCache} {
		p.ok[i] = s.fresh(sig, x.At)
	}
	s.points = append(s.points, p)
	if len(s.points) > s.cfg.MaxSamples {
		s.points = append(s.points[:0], s.points[len(s.points)-s.cfg.MaxSamples:]...)
	}

	// Arrivals, for idleness: an unbroken run of fresh readings, and the
	// last time any showed demand.
	if p.ok[sigArrivals] {
		if s.arrivalsSince.IsZero() || x.At.Sub(s.lastArrivalAt) > s.cfg.MaxAge {
			s.arrivalsSince = x.At
		}
		s.lastArrivalAt = x.At
	} else {
		s.arrivalsSince = time.Time{}
	}
	if (p.ok[sigArrivals] && p.arrivals > 0) || (p.ok[sigOutstanding] && p.outstanding > 0) || (p.ok[sigQueued] && p.queued > 0) {
		s.lastDemand = x.At
	}
}

// Clone returns a copy of s that Decide and Observe can change without
// changing s: a dry run's decision (llmgw ctl plan, a reload's check).
func (s *Scaler) Clone() *Scaler {
	cp := *s
	cp.points = slices.Clone(s.points)
	return &cp
}

// Latest returns the last round observed.
func (s *Scaler) Latest() (Sample, bool) { return s.latest, s.seen }

// prune drops readings older than every window needs.
func (s *Scaler) prune(p facility.Autoscale, now time.Time) {
	horizon := max(p.DownWindow, p.UpWindow) + p.UpWindow + s.cfg.MaxAge
	i := 0
	for i < len(s.points) && now.Sub(s.points[i].at) > horizon {
		i++
	}
	if i > 0 {
		s.points = append(s.points[:0], s.points[i:]...)
	}
}

// needed returns the replicas a point's target signal needs, and whether it
// has one.
func needed(t facility.Target, p *point) (float64, bool) {
	var v float64
	var sig int
	switch t.Kind {
	case facility.TargetOutstanding:
		v, sig = p.outstanding, sigOutstanding
	case facility.TargetWaiting:
		v, sig = p.waits, sigWaiting
	case facility.TargetKVCache:
		v, sig = p.kv, sigKV
	case facility.TargetTTFT:
		v, sig = p.ttft, sigTTFT
	default:
		return 0, false
	}
	if !p.ok[sig] {
		return 0, false
	}
	if t.Kind.Total() {
		return v / t.Value, true
	}
	if p.serving <= 0 {
		return 0, false // a level with nobody serving says nothing
	}
	return float64(p.serving) * v / t.Value, true
}

// targetSignal is the latest reading of the target's signal.
func targetSignal(t facility.Target, x Sample) Signal {
	switch t.Kind {
	case facility.TargetOutstanding:
		return x.Outstanding
	case facility.TargetWaiting:
		return x.Waiting
	case facility.TargetKVCache:
		return x.KVCache
	default:
		return x.TTFT
	}
}

// roundUp rounds replicas needed up, forgiving float noise (8/8 is 1).
func roundUp(x float64) int {
	if x <= 0 {
		return 0
	}
	return int(math.Ceil(x - 1e-9))
}

// Decide returns what the model wants at now, given the replica slots it
// has (serving or coming up). It also notes changes of current since the
// last call: a rise is a scale up, which no scale down follows within the
// down window.
func (s *Scaler) Decide(p facility.Autoscale, now time.Time, current int) Decision {
	if s.counted && current != s.count {
		if current > s.count {
			s.lastUp = now
		}
		s.lastMove = now
	}
	s.count, s.counted = current, true
	s.prune(p, now)

	d := Decision{Current: current, Want: current, Needed: -1, NeededDown: -1}
	set := func(want int, r Rule, format string, args ...any) Decision {
		d.Want, d.Rule, d.Reason = want, r, fmt.Sprintf(format, args...)
		return d
	}
	tgt := p.Target.String()

	// The policy's bounds come first: they are not demand.
	if current < p.Min {
		return set(p.Min, RuleMin, "up %d→%d: below autoscale min %d", current, p.Min, p.Min)
	}
	if current > p.Max {
		return set(p.Max, RuleMax, "down %d→%d: above autoscale max %d", current, p.Max, p.Max)
	}
	floor := max(p.Min, 1) // a model with traffic keeps one

	if current == 0 {
		return s.wake(p, now, d, set)
	}

	// The target's signal must be fresh now.
	if !s.seen {
		return set(current, RuleNoSignal, "holds at %d: no reading of %s's signal yet; counts never move on missing data", current, p.Target.Kind)
	}
	if sig := targetSignal(p.Target, s.latest); !s.fresh(sig, now) {
		return set(current, RuleStale, "holds at %d: %s; counts never move on missing data", current, s.staleness(p.Target, sig, now))
	}
	if !p.Target.Kind.Total() && s.latest.Serving <= 0 {
		return set(current, RuleStale, "holds at %d: no replica serves yet, so %s says nothing; counts never move on missing data", current, p.Target.Kind)
	}

	meanUp, nUp := s.mean(p.Target, now.Add(-p.UpWindow), now)
	meanPanic, nPanic := s.mean(p.Target, now.Add(-p.PanicWindow()), now)
	if nPanic == 0 {
		meanPanic = meanUp // no reading inside the panic window: the latest stands for it
		if last, ok := s.lastNeeded(p.Target); ok {
			meanPanic = last
		}
	}
	if nUp == 0 {
		// The latest reading is fresh at now but older than the up window.
		if last, ok := s.lastNeeded(p.Target); ok {
			meanUp = last
		}
	}
	d.Needed = meanUp
	needUp := min(max(roundUp(meanUp), floor), p.Max)
	needPanic := min(max(roundUp(meanPanic), floor), p.Max)

	// Panic: straight to what the panic window needs.
	if float64(roundUp(meanPanic)) >= p.PanicThreshold*float64(current) && needPanic > current {
		return set(needPanic, RulePanic, "panic %d→%d: %.1f replicas needed over the panic window (%s) by %s, at least panic_threshold %g × %d",
			current, needPanic, meanPanic, fmtDur(p.PanicWindow()), tgt, p.PanicThreshold, current)
	}
	sinceMove := now.Sub(s.lastMove)
	moved := !s.lastMove.IsZero()
	if needUp > current {
		want := min(needUp, current+p.MaxStep)
		if moved && sinceMove < p.UpWindow {
			return set(current, RuleWait, "holds at %d (needs %d): the count changed %s ago, less than up_window %s",
				current, needUp, fmtDur(sinceMove), fmtDur(p.UpWindow))
		}
		step := ""
		if want < needUp {
			step = fmt.Sprintf(" (needs %d; max_step %d)", needUp, p.MaxStep)
		}
		return set(want, RuleUp, "up %d→%d: %.1f replicas needed over up_window %s by %s%s",
			current, want, meanUp, fmtDur(p.UpWindow), tgt, step)
	}

	// Idle: no arrivals for idle_after, read all along.
	if p.Min == 0 && s.idle(p, now) {
		if s.lastUp.IsZero() || now.Sub(s.lastUp) >= p.DownWindow {
			if p.Sleeps() {
				// One replica stays, its engine asleep: it sleeps by
				// itself after the same idle_after, and the next
				// request wakes it.
				if current > 1 {
					return set(1, RuleIdle, "idle %d→1, asleep: no request arrived for idle_after %s; one replica stays, its engine sleeping until the next request (when_idle = sleep)",
						current, fmtDur(p.IdleAfter))
				}
				return set(1, RuleHold, "holds at 1, asleep: no request arrived for idle_after %s; its engine sleeps until the next request (when_idle = sleep)",
					fmtDur(p.IdleAfter))
			}
			return set(0, RuleIdle, "idle %d→0: no request arrived for idle_after %s", current, fmtDur(p.IdleAfter))
		}
	}

	most, covered := s.downNeed(p, now)
	d.NeededDown = most
	needDown := min(max(roundUp(most/(1-s.cfg.DownMargin)), floor), p.Max)
	if !covered || needDown >= current {
		if covered {
			return set(current, RuleHold, "holds at %d: %.1f replicas needed over up_window %s by %s, %.1f at most over down_window %s",
				current, meanUp, fmtDur(p.UpWindow), tgt, most, fmtDur(p.DownWindow))
		}
		if roundUp(meanUp) >= current {
			return set(current, RuleHold, "holds at %d: %.1f replicas needed over up_window %s by %s", current, meanUp, fmtDur(p.UpWindow), tgt)
		}
		return set(current, RuleWait, "holds at %d (needs %d now): %s of down_window %s has fresh readings; a scale down needs all of it",
			current, max(roundUp(meanUp), floor), fmtDur(s.coveredFor(p, now)), fmtDur(p.DownWindow))
	}
	if !s.lastUp.IsZero() && now.Sub(s.lastUp) < p.DownWindow {
		return set(current, RuleWait, "holds at %d (needs %d): the count last went up %s ago; no scale down within down_window %s of a scale up",
			current, needDown, fmtDur(now.Sub(s.lastUp)), fmtDur(p.DownWindow))
	}
	if moved && sinceMove < p.UpWindow {
		return set(current, RuleWait, "holds at %d (needs %d): the count changed %s ago, less than up_window %s",
			current, needDown, fmtDur(sinceMove), fmtDur(p.UpWindow))
	}
	want := max(needDown, current-p.MaxStep)
	step := ""
	if want > needDown {
		step = fmt.Sprintf("; needs %d, max_step %d", needDown, p.MaxStep)
	}
	return set(want, RuleDown, "down %d→%d: at most %.1f replicas needed at any time in down_window %s by %s (%d with a %g %% margin%s)",
		current, want, most, fmtDur(p.DownWindow), tgt, needDown, 100*s.cfg.DownMargin, step)
}

// wake decides for a model at zero.
func (s *Scaler) wake(p facility.Autoscale, now time.Time, d Decision, set func(int, Rule, string, ...any) Decision) Decision {
	x := s.latest
	if !s.seen {
		return set(0, RuleNoSignal, "holds at 0: no reading from the gateways yet")
	}
	q, o, a := x.Queued, x.Outstanding, x.Arrivals
	fq, fo, fa := s.fresh(q, now), s.fresh(o, now), s.fresh(a, now)
	if (fq && q.V > 0) || (fo && o.V > 0) || (fa && a.V > 0) {
		need := 1
		what := ""
		switch {
		case fq && q.V > 0:
			what = fmt.Sprintf("%s queued at the gateways", requests(q.V))
		case fo && o.V > 0:
			what = fmt.Sprintf("%s outstanding at the gateways", requests(o.V))
		default:
			what = fmt.Sprintf("%.2f requests/s arriving", a.V)
		}
		if p.Target.Kind.Total() {
			demand := 0.0
			if fq {
				demand = max(demand, q.V)
			}
			if fo {
				demand = max(demand, o.V)
			}
			need = max(need, roundUp(demand/p.Target.Value))
		}
		want := min(need, p.MaxStep, p.Max)
		d.Needed = float64(need)
		return set(want, RuleWake, "wake 0→%d: %s", want, what)
	}
	if !fq && !fa && !fo {
		return set(0, RuleStale, "holds at 0: %s; counts never move on missing data", s.staleness(facility.Target{}, a, now))
	}
	return set(0, RuleHold, "holds at 0: nothing queued, outstanding or arriving")
}

func requests(v float64) string {
	n := int(math.Round(v))
	if n == 1 {
		return "1 request"
	}
	return strconv.Itoa(n) + " requests"
}

// staleness says why a reading does not count.
func (s *Scaler) staleness(t facility.Target, sig Signal, now time.Time) string {
	name := "the arrivals signal"
	if t.Kind != 0 {
		name = t.Kind.String() + "'s signal"
	}
	switch {
	case !sig.OK && sig.Why != "":
		return name + " is missing (" + sig.Why + ")"
	case !sig.OK:
		return name + " is missing"
	case math.IsNaN(sig.V) || math.IsInf(sig.V, 0) || sig.V < 0:
		return fmt.Sprintf("%s reads %v, not a count", name, sig.V)
	default:
		return fmt.Sprintf("%s is stale (read %s ago; at most %s counts)", name, fmtDur(now.Sub(sig.At)), fmtDur(s.cfg.MaxAge))
	}
}

// mean is the mean of the replicas needed by the points in (from, to].
func (s *Scaler) mean(t facility.Target, from, to time.Time) (float64, int) {
	sum, n := 0.0, 0
	for i := len(s.points) - 1; i >= 0; i-- {
		pt := &s.points[i]
		if !pt.at.After(from) {
			break
		}
		if pt.at.After(to) {
			continue
		}
		if v, ok := needed(t, pt); ok {
			sum += v
			n++
		}
	}
	if n == 0 {
		return 0, 0
	}
	return sum / float64(n), n
}

func (s *Scaler) lastNeeded(t facility.Target) (float64, bool) {
	for i := len(s.points) - 1; i >= 0; i-- {
		if v, ok := needed(t, &s.points[i]); ok {
			return v, true
		}
	}
	return 0, false
}

// downNeed is the most replicas needed at any time of the down window —
// each time's up-window mean — and whether fresh readings cover the whole
// window.
func (s *Scaler) downNeed(p facility.Autoscale, now time.Time) (float64, bool) {
	from := now.Add(-p.DownWindow)
	type fv struct {
		at time.Time
		v  float64
	}
	var vs []fv
	for i := range s.points {
		pt := &s.points[i]
		if pt.at.After(now) {
			break
		}
		if v, ok := needed(p.Target, pt); ok {
			vs = append(vs, fv{pt.at, v})
		}
	}
	most := -1.0
	sum, lo := 0.0, 0
	for hi := range vs {
		sum += vs[hi].v
		for !vs[lo].at.After(vs[hi].at.Add(-p.UpWindow)) {
			sum -= vs[lo].v
			lo++
		}
		if !vs[hi].at.Before(from) {
			most = max(most, sum/float64(hi-lo+1))
		}
	}
	return most, s.covered(p.Target, from, now)
}

// covered reports whether fresh readings of the target's signal cover
// [from, now]: one within MaxAge of from, none further apart than MaxAge
// (Decide has checked that the last is fresh at now).
func (s *Scaler) covered(t facility.Target, from, now time.Time) bool {
	var prev time.Time
	first := true
	for i := range s.points {
		pt := &s.points[i]
		if pt.at.After(now) {
			break
		}
		if _, ok := needed(t, pt); !ok {
			continue
		}
		if pt.at.Before(from) {
			prev, first = pt.at, false
			continue
		}
		switch {
		case first && pt.at.Sub(from) > s.cfg.MaxAge:
			return false
		case !first && pt.at.Sub(prev) > s.cfg.MaxAge:
			return false
		}
		prev, first = pt.at, false
	}
	return !first
}

// coveredFor is how much of the down window, back from now, fresh readings
// cover without a gap.
func (s *Scaler) coveredFor(p facility.Autoscale, now time.Time) time.Duration {
	var start, next time.Time
	for i := len(s.points) - 1; i >= 0; i-- {
		pt := &s.points[i]
		if pt.at.After(now) {
			continue
		}
		if _, ok := needed(p.Target, pt); !ok {
			continue
		}
		if next.IsZero() {
			if now.Sub(pt.at) > s.cfg.MaxAge {
				return 0
			}
		} else if next.Sub(pt.at) > s.cfg.MaxAge {
			break
		}
		start, next = pt.at, pt.at
	}
	if start.IsZero() {
		return 0
	}
	return min(now.Sub(start), p.DownWindow)
}

// idle reports whether no request arrived for IdleAfter, with the
// arrival readings fresh for all of it, and none outstanding or queued now.
func (s *Scaler) idle(p facility.Autoscale, now time.Time) bool {
	x := s.latest
	if s.arrivalsSince.IsZero() || now.Sub(s.arrivalsSince) < p.IdleAfter || !s.fresh(x.Arrivals, now) {
		return false
	}
	if !s.lastDemand.IsZero() && now.Sub(s.lastDemand) < p.IdleAfter {
		return false
	}
	if (s.fresh(x.Outstanding, now) && x.Outstanding.V > 0) || (s.fresh(x.Queued, now) && x.Queued.V > 0) {
		return false
	}
	return true
}

// fmtDur writes a duration without zero tails, to the second.
func fmtDur(d time.Duration) string {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	d = d.Round(time.Second)
	s := d.String()
	if d%time.Minute == 0 {
		s = s[:len(s)-2]
		if d%time.Hour == 0 {
			s = s[:len(s)-2]
		}
	}
	return s
}
