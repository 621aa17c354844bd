package facility

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// DefaultPriority is a model's priority when the catalog gives none.
const DefaultPriority = 50

// MaxPriority is the highest priority a model may have; 0 is the lowest.
const MaxPriority = 100

// TargetKind is the signal an autoscaled model's replica count tracks.
type TargetKind uint8

// The target kinds, as the catalog's target block names them.
const (
	// TargetOutstanding: requests in flight or queued at the gateways, per
	// replica (the sum over the gateways ÷ the target).
	TargetOutstanding TargetKind = iota + 1
	// TargetWaiting: requests waiting in the engines' own queues, per
	// replica.
	TargetWaiting
	// TargetKVCache: the mean KV-cache use of the serving replicas, 0–1.
	TargetKVCache
	// TargetTTFT: the gateways' time to first token, p90.
	TargetTTFT
)

var targetNames = [...]string{
	TargetOutstanding: "outstanding_per_replica",
	TargetWaiting:     "waiting_per_replica",
	TargetKVCache:     "kv_cache_use",
	TargetTTFT:        "ttft_p90",
}

// TargetKinds returns every target kind.
func TargetKinds() []TargetKind {
	return []TargetKind{TargetOutstanding, TargetWaiting, TargetKVCache, TargetTTFT}
}

// String is the kind's name in the catalog.
func (k TargetKind) String() string {
	if k > 0 && int(k) < len(targetNames) {
		return targetNames[k]
	}
	return "target(" + strconv.Itoa(int(k)) + ")"
}

// Total reports whether the kind's signal is a total over the model's
// replicas (outstanding, waiting): the replicas needed are the total ÷ the
// target. The others (KV-cache use, TTFT) are a level each replica shows:
// the replicas needed are the serving replicas × the level ÷ the target.
func (k TargetKind) Total() bool { return k == TargetOutstanding || k == TargetWaiting }

// Target is the value an autoscaled model's signal is held at.
type Target struct {
	Kind TargetKind
	// Value is requests per replica (outstanding, waiting), a fraction
	// (KV cache) or seconds (TTFT p90).
	Value float64
}

// String is the target as the catalog writes it: "outstanding_per_replica
// = 8", "ttft_p90 = 800ms".
func (t Target) String() string {
	v := strconv.FormatFloat(t.Value, 'g', -1, 64)
	if t.Kind == TargetTTFT {
		v = strconv.Quote(time.Duration(t.Value * float64(time.Second)).String())
	}
	return t.Kind.String() + " = " + v
}

// Autoscale is a model's scaling policy: its replica count follows its
// target between Min and Max (controller/autoscale decides, the
// reconciler places within the facility's budgets).
type Autoscale struct {
	Min, Max int
	Target   Target
	// UpWindow is the look-back for a scale up: the signal's mean over it.
	// A tenth of it is the panic window.
	UpWindow time.Duration
	// DownWindow is the look-back for a scale down: the most replicas
	// needed at any time in it. No scale down comes sooner than
	// DownWindow after a scale up.
	DownWindow time.Duration
	// MaxStep is the most one decision moves the count (panic, waking from
	// zero and going idle excepted).
	MaxStep int
	// PanicThreshold: when the replicas needed over the panic window reach
	// PanicThreshold × the current count, the count jumps straight to what
	// is needed.
	PanicThreshold float64
	// IdleAfter, with Min 0: a model with no arrivals for this long goes to
	// zero replicas (or, WhenIdle IdleSleep, to one asleep).
	IdleAfter time.Duration
	// WhenIdle, with Min 0, is what idle_after does: IdleStop ("" too)
	// stops every replica; IdleSleep keeps one whose engine sleeps, its
	// own sleep after IdleAfter without a request (engine.SleepMode:
	// llama.cpp's --sleep-idle-seconds), holding its GPUs and waking in
	// the engine's reload time instead of a whole placement and start.
	WhenIdle string `json:",omitempty"`
	Pos      Pos
}

// What an idle model (Min 0, no request for IdleAfter) comes to.
const (
	IdleStop  = "stop"
	IdleSleep = "sleep"
)

// Sleeps reports whether an idle model keeps one replica asleep.
func (a *Autoscale) Sleeps() bool { return a != nil && a.Min == 0 && a.WhenIdle == IdleSleep }

// The autoscale defaults, for engines that load for minutes: a scale up
// reads 30 s of demand (long enough not to chase one burst of a few
// requests, short next to a load); a scale down needs 10 minutes of lower
// demand, longer than a load takes, so a replica is never stopped on a
// lull shorter than it takes to bring one back; a step of 2 replicas; panic
// at twice the current count; and 30 minutes without a request before a
// model with min = 0 goes to zero, as waking costs a whole load with its
// first requests held.
const (
	DefaultAutoscaleMin   = 1
	DefaultUpWindow       = 30 * time.Second
	DefaultDownWindow     = 10 * time.Minute
	DefaultMaxStep        = 2
	DefaultPanicThreshold = 2.0
	DefaultIdleAfter      = 30 * time.Minute
	minUpWindow           = 5 * time.Second
	maxUpWindow           = 30 * time.Minute
	minDownWindow         = time.Minute
	maxDownWindow         = 24 * time.Hour
	maxIdleAfter          = 7 * 24 * time.Hour
	maxTTFTTarget         = 10 * time.Minute
	maxPerReplicaTarget   = 1e6
	maxPanicThreshold     = 100.0
	minPanicThreshold     = 1.0 // exclusive
	targetNameList        = "outstanding_per_replica, waiting_per_replica, kv_cache_use or ttft_p90"
)

// DefaultAutoscale returns the defaults of an autoscale block; Max and
// Target have none (the parser requires them).
func DefaultAutoscale() Autoscale {
	return Autoscale{
		Min: DefaultAutoscaleMin, UpWindow: DefaultUpWindow, DownWindow: DefaultDownWindow,
		MaxStep: DefaultMaxStep, PanicThreshold: DefaultPanicThreshold, IdleAfter: DefaultIdleAfter,
	}
}

// PanicWindow is a tenth of the up window.
func (a Autoscale) PanicWindow() time.Duration { return a.UpWindow / 10 }

// Clamp returns n within Min and Max.
func (a Autoscale) Clamp(n int) int { return min(max(n, a.Min), a.Max) }

// SlotLimit is one above the highest replica index the model may use: its
// fixed replicas, or its autoscale max.
func (m Model) SlotLimit() int {
	if m.Autoscale != nil {
		return m.Autoscale.Max
	}
	return m.Replicas
}

// Floor is the fewest replicas the model must have: its fixed replicas, or
// its autoscale min. Nothing takes a model's replicas below its floor.
func (m Model) Floor() int {
	if m.Autoscale != nil {
		return m.Autoscale.Min
	}
	return m.Replicas
}

// validate checks the policy, each problem naming its field.
func (a Autoscale) validate() []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if err := checkInt("min", a.Min, 0, maxCount); err != nil {
		add("%v", err)
	}
	if err := checkInt("max", a.Max, 1, maxCount); err != nil {
		add("%v", err)
	}
	if a.Min > a.Max && a.Max >= 1 {
		add("min (%d) is above max (%d)", a.Min, a.Max)
	}
	if err := a.Target.check(); err != nil {
		add("%v", err)
	}
	if err := checkDuration("up_window", a.UpWindow, minUpWindow, maxUpWindow); err != nil {
		add("%v", err)
	}
	if err := checkDuration("down_window", a.DownWindow, minDownWindow, maxDownWindow); err != nil {
		add("%v", err)
	} else if a.DownWindow < a.UpWindow {
		add("down_window (%s) is shorter than up_window (%s)", fmtDuration(a.DownWindow), fmtDuration(a.UpWindow))
	}
	if err := checkInt("max_step", a.MaxStep, 1, maxCount); err != nil {
		add("%v", err)
	}
	if err := checkPanic(a.PanicThreshold); err != nil {
		add("%v", err)
	}
	if a.Min == 0 {
		if err := checkDuration("idle_after", a.IdleAfter, a.DownWindow, maxIdleAfter); err != nil {
			add("%v (a model goes to zero no sooner than down_window after its last scale up)", err)
		}
	}
	switch {
	case a.WhenIdle != "" && a.WhenIdle != IdleStop && a.WhenIdle != IdleSleep:
		add("when_idle %q: want %q or %q", a.WhenIdle, IdleStop, IdleSleep)
	case a.WhenIdle == IdleSleep && a.Min > 0:
		add("when_idle = %q is only for min = 0 (an idle model keeps one replica asleep); min is %d", IdleSleep, a.Min)
	}
	return bad
}

func (t Target) check() error {
	v := t.Value
	switch t.Kind {
	case TargetOutstanding, TargetWaiting:
		if math.IsNaN(v) || v <= 0 || v > maxPerReplicaTarget {
			return fmt.Errorf("target %s must be above 0 and at most %g, got %v", t.Kind, maxPerReplicaTarget, v)
		}
	case TargetKVCache:
		if math.IsNaN(v) || v <= 0 || v > 1 {
			return fmt.Errorf("target kv_cache_use must be above 0 and at most 1, got %v", v)
		}
	case TargetTTFT:
		if math.IsNaN(v) || v <= 0 || v > maxTTFTTarget.Seconds() {
			return fmt.Errorf("target ttft_p90 must be above 0 and at most %s, got %v s", fmtDuration(maxTTFTTarget), v)
		}
	default:
		return errors.New("target needs one of " + targetNameList)
	}
	return nil
}

func checkDuration(what string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return fmt.Errorf("%s must be from %s to %s, got %s", what, fmtDuration(lo), fmtDuration(hi), fmtDuration(d))
	}
	return nil
}

func checkPanic(v float64) error {
	if math.IsNaN(v) || v <= minPanicThreshold || v > maxPanicThreshold {
		return fmt.Errorf("panic_threshold must be above %g and at most %g, got %v", minPanicThreshold, maxPanicThreshold, v)
	}
	return nil
}

// fmtDuration writes whole hours and minutes without the zero tails
// time.Duration.String adds ("10m", not "10m0s").
func fmtDuration(d time.Duration) string {
	s := d.String()
	if d%time.Minute == 0 && strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if d%time.Hour == 0 && strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
