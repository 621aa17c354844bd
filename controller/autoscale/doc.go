// Package autoscale decides how many replicas an autoscaled model wants,
// from its signals over time and the catalog's policy (facility.Autoscale).
// It is pure: no I/O, no clock, no goroutines. Time arrives as values — each
// reading's own time and the time of the decision — so the same readings
// always give the same decision, and a test or a simulation can replay a
// day in a second.
//
// One Scaler follows one model. The controller feeds it a Sample per round
// (Observe) — demand from the gateways (outstanding, queued, arrival rate,
// TTFT p90), the engines' own load (waiting requests, KV-cache use) — and
// asks it, once per pass, what the model wants (Decide) given how many
// replica slots the model has now. What the model then gets is the
// reconciler's business (controller/reconcile): the budgets, spread and
// holds may give it less, and a model of higher priority may take watts
// from it (docs/controller.md, "Autoscaling").
//
// # Rules
//
// Replicas needed at one reading: for a total signal (outstanding, waiting)
// the total ÷ the target; for a level (KV-cache use, TTFT p90) the serving
// replicas × the level ÷ the target.
//
//   - Missing or stale readings never read as zero. A reading is fresh when
//     its source gave it (Signal.OK) and it is at most MaxAge old at the
//     decision. When the latest reading of the target's signal is not
//     fresh the model keeps its count, and the decision says why.
//   - Up: the mean of the replicas needed over the up window, rounded up;
//     at most MaxStep more than now.
//   - Panic: when the mean over the panic window (a tenth of the up window)
//     reaches PanicThreshold × the count now, the count jumps straight to
//     it, MaxStep or not.
//   - Down: the most replicas needed at any time in the down window (each
//     time's own up-window mean), Knative's and the HPA's stable window,
//     with a margin (Config.DownMargin, 10 %) so that the count is not
//     taken down to a value the next small rise undoes; at most MaxStep
//     fewer than now. Only when the whole down window has fresh
//     readings (a restarted controller waits one down window), and never
//     sooner than DownWindow after the count last went up: no up-down-up
//     inside the down window.
//   - The count changes at most once per up window, panic excepted; so
//     MaxStep is a rate (replicas per up window), whatever the pass rate.
//   - Min and Max bound everything. A model with traffic never wants fewer
//     than one replica; zero comes only from idleness.
//   - Idle (Min 0): no request arrived for IdleAfter — arrivals are the
//     signal, not the queue, which is empty on a busy model too — with the
//     arrival readings fresh for all of it, and nothing outstanding or
//     queued: the count goes to zero.
//   - Wake: a model at zero with requests queued, outstanding or arriving
//     wants what they need, at most MaxStep (the gateway holds the rest,
//     so that waking is no thundering herd).
//
// Every Decision carries a Rule (a stable label for metrics) and a Reason
// (for explain).
package autoscale
