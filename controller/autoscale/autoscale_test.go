package autoscale

import (
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/facility"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const tick = 5 * time.Second

func policy(edit ...func(*facility.Autoscale)) facility.Autoscale {
	p := facility.DefaultAutoscale()
	p.Max, p.Target = 10, facility.Target{Kind: facility.TargetOutstanding, Value: 8}
	for _, e := range edit {
		e(&p)
	}
	return p
}

// busy is a round with outstanding requests (and arrivals, so not idle).
func busy(at time.Time, outstanding float64) Sample {
	return Sample{
		At: at, Outstanding: Reading(outstanding, at), Queued: Reading(0, at), Arrivals: Reading(outstanding/4, at),
		Waiting: Reading(0, at), KVCache: Reading(0.5, at), TTFT: Reading(0.3, at), Serving: 2,
	}
}

// run feeds rounds every tick over [from, to) and returns the time after.
func run(s *Scaler, from, to time.Time, f func(at time.Time) Sample) time.Time {
	at := from
	for ; at.Before(to); at = at.Add(tick) {
		s.Observe(f(at))
	}
	return at
}

func constant(v float64) func(time.Time) Sample {
	return func(at time.Time) Sample { return busy(at, v) }
}

func expect(t *testing.T, d Decision, want int, rule Rule, reason string) {
	t.Helper()
	if d.Want != want || d.Rule != rule || !strings.Contains(d.Reason, reason) {
		t.Errorf("got want %d rule %s reason %q; want %d, %s, reason containing %q", d.Want, d.Rule, d.Reason, want, rule, reason)
	}
}

func TestUpByTheUpWindowAndMaxStep(t *testing.T) {
	t.Parallel()
	p := policy()
	s := New(Config{})
	now := run(s, t0, t0.Add(time.Minute), constant(56)) // 56 ÷ 8: 7 replicas, under 2 × 4
	expect(t, s.Decide(p, now, 4), 6, RuleUp, "up 4→6: 7.0 replicas needed over up_window 30s by outstanding_per_replica = 8 (needs 7; max_step 2)")
	// The count moved: the next step waits an up window.
	now = run(s, now, now.Add(10*time.Second), constant(56))
	expect(t, s.Decide(p, now, 6), 6, RuleWait, "the count changed 0s ago, less than up_window 30s")
	now = run(s, now, now.Add(15*time.Second), constant(56))
	expect(t, s.Decide(p, now, 6), 6, RuleWait, "changed 15s ago")
	now = run(s, now, now.Add(20*time.Second), constant(56))
	d := s.Decide(p, now, 6)
	expect(t, d, 7, RuleUp, "up 6→7")
	if want := "up 6→7: 7.0 replicas needed over up_window 30s by outstanding_per_replica = 8"; d.Reason != want {
		t.Errorf("reason %q, want %q", d.Reason, want)
	}
}

// The up window is a mean: one busy round in it does not buy the whole burst.
func TestUpWindowIsAMean(t *testing.T) {
	t.Parallel()
	p := policy()
	s := New(Config{})
	now := run(s, t0, t0.Add(time.Minute), constant(16)) // needs 2
	s.Observe(busy(now, 24))                             // one round at 3, under the panic threshold of 2 × 2
	d := s.Decide(p, now, 2)
	// 5 rounds of 2 and one of 3 in the up window: 2.2, so 3.
	expect(t, d, 3, RuleUp, "up 2→3: 2.2 replicas needed")
}

func TestPanicJumpsStraightToWhatIsNeeded(t *testing.T) {
	t.Parallel()
	p := policy()
	s := New(Config{})
	now := run(s, t0, t0.Add(time.Minute), constant(16)) // 2 replicas
	s.Decide(p, now, 2)
	// A burst: 72 outstanding in the last rounds (9 replicas), within the
	// panic window of 3s; the up window's mean is far less.
	s.Observe(busy(now.Add(tick), 72))
	now = now.Add(tick)
	expect(t, s.Decide(p, now, 2), 9, RulePanic, "panic 2→9: 9.0 replicas needed over the panic window (3s) by outstanding_per_replica = 8, at least panic_threshold 2 × 2")
	// Below the threshold it is an ordinary step.
	s2 := New(Config{})
	now = run(s2, t0, t0.Add(time.Minute), constant(16))
	s2.Observe(busy(now.Add(tick), 24)) // 3 < 2 × 2
	expect(t, s2.Decide(p, now.Add(tick), 2), 3, RuleUp, "up 2→3")
	// Panic is capped at max.
	s3 := New(Config{})
	now = run(s3, t0, t0.Add(time.Minute), constant(16))
	s3.Observe(busy(now.Add(tick), 800))
	expect(t, s3.Decide(p, now.Add(tick), 2), 10, RulePanic, "panic 2→10")
	// And it ignores the wait for the up window after a change.
	s4 := New(Config{})
	now = run(s4, t0, t0.Add(time.Minute), constant(16))
	s4.Decide(p, now, 1)
	s4.Decide(p, now, 2) // moved just now
	s4.Observe(busy(now.Add(tick), 72))
	expect(t, s4.Decide(p, now.Add(tick), 2), 9, RulePanic, "panic 2→9")
}

func TestDownByTheMostOverTheDownWindow(t *testing.T) {
	t.Parallel()
	p := policy()
	s := New(Config{})
	start := t0
	now := run(s, start, start.Add(20*time.Minute), constant(48)) // 6 replicas
	expect(t, s.Decide(p, now, 6), 6, RuleHold, "holds at 6")
	// Demand falls to 2 replicas' worth. For the next 10 minutes the
	// window still holds a time that needed 6.
	fall := now
	now = run(s, now, fall.Add(9*time.Minute), constant(16))
	expect(t, s.Decide(p, now, 6), 6, RuleHold, "6.0 at most over down_window 10m")
	now = run(s, now, fall.Add(10*time.Minute+time.Minute), constant(16))
	expect(t, s.Decide(p, now, 6), 4, RuleDown, "down 6→4: at most 2.0 replicas needed at any time in down_window 10m by outstanding_per_replica = 8 (3 with a 10 % margin; needs 3, max_step 2)")
	// The next step waits an up window after the change.
	expect(t, s.Decide(p, now, 4), 4, RuleWait, "the count changed 0s ago")
	now = run(s, now, now.Add(30*time.Second), constant(16))
	expect(t, s.Decide(p, now, 4), 3, RuleDown, "down 4→3")
	now = run(s, now, now.Add(30*time.Second), constant(16))
	expect(t, s.Decide(p, now, 3), 3, RuleHold, "holds at 3")
}

// A short dip inside the down window never scales down: the window's most
// is what counts.
func TestNoDownOnAShortDip(t *testing.T) {
	t.Parallel()
	p := policy()
	s := New(Config{})
	now := run(s, t0, t0.Add(15*time.Minute), constant(40))
	for i := 0; i < 40; i++ { // 40 × 5s dips and peaks
		v := 40.0
		if i%10 < 5 {
			v = 8
		}
		s.Observe(busy(now, v))
		if d := s.Decide(p, now, 5); d.Want < 5 {
			t.Fatalf("round %d: %s", i, d.Reason)
		}
		now = now.Add(tick)
	}
}

// No up-down-up inside the down window: a down only down_window after the
// count last went up, whatever the window's readings say.
func TestNoDownWithinTheDownWindowOfAnUp(t *testing.T) {
	t.Parallel()
	p := policy()
	s := New(Config{})
	now := run(s, t0, t0.Add(20*time.Minute), constant(8)) // 1 replica needed all along
	s.Decide(p, now, 2)
	s.Decide(p, now, 6) // went up (a pin, a min raised, another decision)
	for _, after := range []time.Duration{time.Minute, 5 * time.Minute, 9*time.Minute + 55*time.Second} {
		at := run(s, now, now.Add(after), constant(8))
		expect(t, s.Decide(p, at, 6), 6, RuleWait, "the count last went up")
	}
	at := run(s, now, now.Add(10*time.Minute), constant(8))
	expect(t, s.Decide(p, at, 6), 4, RuleDown, "down 6→4")
}

// A pin that raised the count is a scale up like any other: the down
// window runs from the raise, not from the pin's expiry. A pin shorter than
// down_window holds the raised count until down_window after the raise; one
// longer lets it fall as soon as it expires (the controller decides every
// pass, pinned or not, so the scaler sees the raise when it happens).
func TestARaisingPinStartsTheDownWindowAtTheRaise(t *testing.T) {
	t.Parallel()
	p := policy() // down_window 10m
	for _, tc := range []struct {
		pin     time.Duration
		waitFor time.Duration // after the expiry, before the first down
	}{
		{2 * time.Minute, 8 * time.Minute},
		{15 * time.Minute, 0},
	} {
		s := New(Config{})
		now := run(s, t0, t0.Add(20*time.Minute), constant(8)) // 1 replica needed all along
		s.Decide(p, now, 2)
		raised := now
		// Pinned at 6: the pass decides with the pinned count every tick.
		for now.Before(raised.Add(tc.pin)) {
			now = run(s, now, now.Add(tick), constant(8))
			s.Decide(p, now, 6)
		}
		expired := now
		var first time.Time
		for now.Before(expired.Add(tc.waitFor + time.Minute)) {
			if d := s.Decide(p, now, 6); d.Rule == RuleDown {
				first = now
				expect(t, d, 4, RuleDown, "down 6→4")
				break
			} else if d.Rule != RuleWait || !strings.Contains(d.Reason, "the count last went up") {
				t.Fatalf("pin %s: at %s after the expiry: %s %q, want a wait for the down window", tc.pin, now.Sub(expired), d.Rule, d.Reason)
			}
			now = run(s, now, now.Add(tick), constant(8))
		}
		if first.IsZero() {
			t.Fatalf("pin %s: no scale down within %s of its expiry", tc.pin, tc.waitFor+time.Minute)
		}
		if got := first.Sub(expired); got < tc.waitFor || got > tc.waitFor+tick {
			t.Errorf("pin %s: the first scale down %s after the expiry, want %s (down_window 10m from the raise)", tc.pin, got, tc.waitFor)
		}
	}
}

func TestMissingSignalsNeverReadAsZero(t *testing.T) {
	t.Parallel()
	p := policy()
	t.Run("source down", func(t *testing.T) {
		s := New(Config{})
		now := run(s, t0, t0.Add(20*time.Minute), constant(40))
		x := busy(now, 0)
		x.Outstanding = Missing("gateway gw-2: connection refused")
		s.Observe(x)
		expect(t, s.Decide(p, now, 5), 5, RuleStale, "holds at 5: outstanding_per_replica's signal is missing (gateway gw-2: connection refused); counts never move on missing data")
	})
	t.Run("old reading", func(t *testing.T) {
		s := New(Config{})
		now := run(s, t0, t0.Add(20*time.Minute), constant(0))
		later := now.Add(95 * time.Second)
		expect(t, s.Decide(p, later, 5), 5, RuleStale, "is stale (read 1m40s ago; at most 1m counts)")
	})
	t.Run("nothing yet", func(t *testing.T) {
		expect(t, New(Config{}).Decide(p, t0, 3), 3, RuleNoSignal, "holds at 3: no reading")
	})
	t.Run("not a number", func(t *testing.T) {
		s := New(Config{})
		x := busy(t0, 0)
		x.Outstanding.V = -1
		s.Observe(x)
		expect(t, s.Decide(p, t0, 3), 3, RuleStale, "reads -1, not a count")
	})
	t.Run("a gap keeps a down waiting", func(t *testing.T) {
		s := New(Config{})
		now := run(s, t0, t0.Add(5*time.Minute), constant(8))
		now = now.Add(2 * time.Minute) // no rounds: longer than MaxAge
		now = run(s, now, now.Add(9*time.Minute), constant(8))
		expect(t, s.Decide(p, now, 4), 4, RuleWait, "of down_window 10m has fresh readings; a scale down needs all of it")
		now = run(s, now, now.Add(2*time.Minute), constant(8))
		expect(t, s.Decide(p, now, 4), 2, RuleDown, "down 4→2")
	})
	t.Run("a restarted controller waits a down window", func(t *testing.T) {
		s := New(Config{})
		now := run(s, t0, t0.Add(3*time.Minute), constant(0))
		expect(t, s.Decide(p, now, 6), 6, RuleWait, "holds at 6 (needs 1 now): 3m of down_window 10m has fresh readings")
	})
	t.Run("missing arrivals never idle", func(t *testing.T) {
		s := New(Config{})
		p0 := policy(func(a *facility.Autoscale) { a.Min = 0 })
		now := run(s, t0, t0.Add(2*time.Hour), func(at time.Time) Sample {
			x := busy(at, 0)
			x.Arrivals = Missing("gateway metrics unreadable")
			return x
		})
		d := s.Decide(p0, now, 2)
		if d.Want == 0 {
			t.Errorf("went to zero on missing arrivals: %s", d.Reason)
		}
	})
}

func TestIdleGoesToZeroOnNoArrivals(t *testing.T) {
	t.Parallel()
	p := policy(func(a *facility.Autoscale) { a.Min = 0 })
	quiet := func(at time.Time) Sample { return busy(at, 0) } // busy(…, 0) arrives at 0/4 = 0
	s := New(Config{})
	now := run(s, t0, t0.Add(29*time.Minute), quiet)
	if d := s.Decide(p, now, 2); d.Want == 0 {
		t.Fatalf("idle before idle_after: %s", d.Reason)
	}
	now = run(s, now, t0.Add(31*time.Minute), quiet)
	expect(t, s.Decide(p, now, 2), 0, RuleIdle, "idle 2→0: no request arrived for idle_after 30m")

	// Arrivals with nothing waiting or outstanding at any reading: a busy
	// model whose requests are short (llm-d-autoscaling #1498). Not idle.
	pw := policy(func(a *facility.Autoscale) {
		a.Min, a.Target = 0, facility.Target{Kind: facility.TargetWaiting, Value: 4}
	})
	s = New(Config{})
	now = run(s, t0, t0.Add(2*time.Hour), func(at time.Time) Sample {
		x := busy(at, 0)
		x.Arrivals = Reading(3, at)
		return x
	})
	d := s.Decide(pw, now, 2)
	if d.Want == 0 {
		t.Errorf("a model with arrivals went to zero: %s", d.Reason)
	}
	if d.Want != 1 {
		t.Errorf("nothing waits: want the floor of 1 replica for a model with traffic, got %d (%s)", d.Want, d.Reason)
	}

	// One arrival inside idle_after keeps it.
	s = New(Config{})
	now = run(s, t0, t0.Add(20*time.Minute), quiet)
	x := busy(now, 0)
	x.Arrivals = Reading(0.1, now)
	s.Observe(x)
	now = run(s, now.Add(tick), now.Add(25*time.Minute), quiet)
	if d := s.Decide(p, now, 1); d.Want == 0 {
		t.Errorf("idle though a request arrived %s ago: %s", 25*time.Minute, d.Reason)
	}
	// Arrivals read long enough ago no longer count, though the target's
	// own signal (from the engines) is fresh.
	pk := policy(func(a *facility.Autoscale) {
		a.Min, a.Target = 0, facility.Target{Kind: facility.TargetKVCache, Value: 0.7}
	})
	s = New(Config{})
	now = run(s, t0, t0.Add(time.Hour), func(at time.Time) Sample {
		x := busy(at, 0)
		x.Arrivals = Reading(0, at.Add(-50*time.Second)) // fresh when taken
		return x
	})
	if d := s.Decide(pk, now.Add(10*time.Second), 2); d.Want == 0 { // the arrivals are 65s old
		t.Errorf("idle on stale arrivals: %s", d.Reason)
	}
	if d := s.Decide(pk, now.Add(-tick), 2); d.Want != 0 {
		t.Errorf("fresh: want idle, got %d (%s)", d.Want, d.Reason)
	}
	// Not within the down window of an up.
	s = New(Config{})
	now = run(s, t0, t0.Add(40*time.Minute), quiet)
	s.Decide(p, now, 0)
	s.Decide(p, now, 1) // woke
	now = run(s, now, now.Add(5*time.Minute), quiet)
	if d := s.Decide(p, now, 1); d.Want == 0 {
		t.Errorf("idle 5m after waking, within down_window: %s", d.Reason)
	}
}

func TestWakeFromZero(t *testing.T) {
	t.Parallel()
	p := policy(func(a *facility.Autoscale) { a.Min = 0 })
	queued := func(n float64) Sample {
		x := busy(t0, 0)
		x.Queued, x.Outstanding, x.Serving = Reading(n, t0), Reading(n, t0), 0
		x.Waiting, x.KVCache, x.TTFT = Missing("no engine serves"), Missing("no engine serves"), Missing("no request served")
		return x
	}
	s := New(Config{})
	s.Observe(queued(3))
	expect(t, s.Decide(p, t0, 0), 1, RuleWake, "wake 0→1: 3 requests queued at the gateways")
	s = New(Config{})
	s.Observe(queued(40)) // 5 replicas' worth: max_step at a time
	expect(t, s.Decide(p, t0, 0), 2, RuleWake, "wake 0→2: 40 requests queued")
	s = New(Config{})
	s.Observe(queued(0))
	expect(t, s.Decide(p, t0, 0), 0, RuleHold, "holds at 0: nothing queued, outstanding or arriving")
	s = New(Config{})
	x := queued(5)
	x.Queued, x.Outstanding, x.Arrivals = Missing("gateway down"), Missing("gateway down"), Missing("gateway down")
	s.Observe(x)
	expect(t, s.Decide(p, t0, 0), 0, RuleStale, "holds at 0: the arrivals signal is missing (gateway down)")
	// A level target wakes on the queue too.
	pk := policy(func(a *facility.Autoscale) {
		a.Min, a.Target = 0, facility.Target{Kind: facility.TargetKVCache, Value: 0.7}
	})
	s = New(Config{})
	s.Observe(queued(40))
	expect(t, s.Decide(pk, t0, 0), 1, RuleWake, "wake 0→1")
}

func TestMinAndMax(t *testing.T) {
	t.Parallel()
	p := policy(func(a *facility.Autoscale) { a.Min, a.Max = 2, 6 })
	s := New(Config{})
	expect(t, s.Decide(p, t0, 0), 2, RuleMin, "up 0→2: below autoscale min 2")
	expect(t, s.Decide(p, t0, 9), 6, RuleMax, "down 9→6: above autoscale max 6")
	now := run(s, t0, t0.Add(time.Minute), constant(800))
	d := s.Decide(p, now.Add(time.Hour), 6) // stale, but at max anyway
	if d.Want != 6 {
		t.Errorf("got %d", d.Want)
	}
	s = New(Config{})
	now = run(s, t0, t0.Add(time.Minute), constant(800))
	if d := s.Decide(p, now, 5); d.Want > 6 {
		t.Errorf("above max: %d", d.Want)
	}
	// The floor: down never below min.
	s = New(Config{})
	now = run(s, t0, t0.Add(30*time.Minute), constant(0))
	expect(t, s.Decide(p, now, 3), 2, RuleDown, "down 3→2")
	expect(t, s.Decide(p, now, 2), 2, RuleHold, "holds at 2")
}

func TestLevelTargets(t *testing.T) {
	t.Parallel()
	pk := policy(func(a *facility.Autoscale) { a.Target = facility.Target{Kind: facility.TargetKVCache, Value: 0.7} })
	s := New(Config{})
	now := run(s, t0, t0.Add(time.Minute), func(at time.Time) Sample {
		x := busy(at, 0)
		x.KVCache, x.Serving = Reading(0.875, at), 4 // 4 × 0.875 ÷ 0.7 = 5
		return x
	})
	expect(t, s.Decide(pk, now, 4), 5, RuleUp, "up 4→5: 5.0 replicas needed over up_window 30s by kv_cache_use = 0.7")
	// Nobody serving: the level says nothing.
	s = New(Config{})
	now = run(s, t0, t0.Add(time.Minute), func(at time.Time) Sample {
		x := busy(at, 0)
		x.Serving = 0
		return x
	})
	expect(t, s.Decide(pk, now, 2), 2, RuleStale, "no replica serves yet")

	pt := policy(func(a *facility.Autoscale) { a.Target = facility.Target{Kind: facility.TargetTTFT, Value: 0.8} })
	s = New(Config{})
	now = run(s, t0, t0.Add(time.Minute), func(at time.Time) Sample {
		x := busy(at, 0)
		x.TTFT, x.Serving = Reading(1.2, at), 2 // 2 × 1.2 ÷ 0.8 = 3
		return x
	})
	expect(t, s.Decide(pt, now, 2), 3, RuleUp, `up 2→3: 3.0 replicas needed over up_window 30s by ttft_p90 = "800ms"`)

	pw := policy(func(a *facility.Autoscale) { a.Target = facility.Target{Kind: facility.TargetWaiting, Value: 4} })
	s = New(Config{})
	now = run(s, t0, t0.Add(time.Minute), func(at time.Time) Sample {
		x := busy(at, 0)
		x.Waiting = Reading(20, at) // 5
		return x
	})
	expect(t, s.Decide(pw, now, 3), 5, RuleUp, "up 3→5: 5.0 replicas needed over up_window 30s by waiting_per_replica = 4")
}

// The down window's most is each time's up-window mean, so one busy round
// in a quiet window counts as its share of an up window, not as a peak.
func TestDownNeedIsTheMostOfUpWindowMeans(t *testing.T) {
	t.Parallel()
	p := policy()
	s := New(Config{})
	now := run(s, t0, t0.Add(15*time.Minute), constant(8))
	s.Observe(busy(now, 8*7)) // one round of 7 replicas: with the 5 before it in the up window, a mean of (5×1 + 7) / 6 = 2
	now = run(s, now.Add(tick), now.Add(3*time.Minute), constant(8))
	d := s.Decide(p, now, 4)
	if d.NeededDown != 2 {
		t.Errorf("needed down %v, want 2 (%s)", d.NeededDown, d.Reason)
	}
	// 2 ÷ 0.9 with the margin: 3.
	expect(t, d, 3, RuleDown, "down 4→3: at most 2.0 replicas needed at any time in down_window 10m by outstanding_per_replica = 8 (3 with a 10 % margin)")
	s = New(Config{DownMargin: 0.01})
	now = run(s, t0, t0.Add(15*time.Minute), constant(8))
	s.Observe(busy(now, 8*7))
	now = run(s, now.Add(tick), now.Add(3*time.Minute), constant(8))
	expect(t, s.Decide(p, now, 4), 3, RuleDown, "down 4→3: at most 2.0")
	s = New(Config{DownMargin: 0.01})
	now = run(s, t0, t0.Add(15*time.Minute), constant(8))
	expect(t, s.Decide(p, now, 4), 2, RuleDown, "down 4→2: at most 1.0 replicas needed at any time in down_window 10m by outstanding_per_replica = 8 (2 with a 1 % margin)")
}

func TestReadingsAreBounded(t *testing.T) {
	t.Parallel()
	p := policy()
	s := New(Config{MaxSamples: 50})
	now := run(s, t0, t0.Add(time.Hour), constant(8))
	if len(s.points) != 50 {
		t.Errorf("kept %d readings, want the bound 50", len(s.points))
	}
	// 50 × 5s covers no down window: the scaler holds.
	expect(t, s.Decide(p, now, 4), 4, RuleWait, "a scale down needs all of it")
	// Without the bound, readings older than every window are pruned.
	s = New(Config{})
	now = run(s, t0, t0.Add(3*time.Hour), constant(8))
	s.Decide(p, now, 1)
	if n := len(s.points); n > int((10*time.Minute+time.Minute+30*time.Second)/tick)+2 {
		t.Errorf("kept %d readings after pruning", n)
	}
	// Rounds out of order are dropped.
	s.Observe(busy(t0, 800))
	if last, _ := s.Latest(); !last.At.Equal(now.Add(-tick)) {
		t.Errorf("latest %s", last.At)
	}
}

func TestRuleNames(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, r := range Rules() {
		n := r.String()
		if n == "" || strings.HasPrefix(n, "rule(") || seen[n] {
			t.Errorf("rule %d: name %q", r, n)
		}
		seen[n] = true
	}
	if len(seen) != 11 {
		t.Errorf("%d rules", len(seen))
	}
}

// when_idle = "sleep": an idle model comes to one replica asleep, not
// zero, and holds there; the same model with requests scales as before.
func TestIdleSleepKeepsOneAsleep(t *testing.T) {
	t.Parallel()
	p := policy(func(a *facility.Autoscale) { a.Min, a.WhenIdle = 0, facility.IdleSleep })
	quiet := func(at time.Time) Sample { return busy(at, 0) }
	s := New(Config{})
	now := run(s, t0, t0.Add(31*time.Minute), quiet)
	expect(t, s.Decide(p, now, 3), 1, RuleIdle, "idle 3→1, asleep: no request arrived for idle_after 30m")
	now = run(s, now, now.Add(time.Hour), quiet)
	expect(t, s.Decide(p, now, 1), 1, RuleHold, "holds at 1, asleep: no request arrived for idle_after 30m")
	if (&facility.Autoscale{Min: 1, WhenIdle: facility.IdleSleep}).Sleeps() {
		t.Error("a policy with min 1 sleeps")
	}
}
