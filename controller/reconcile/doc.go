// Package reconcile is the controller's decision core: given the catalog
// (what should run), the fleet and facility (where things may run) and the
// managed jobs Nomad holds (what runs), it returns the actions that move
// the second towards the first. It is pure — no I/O, no clock, no logging —
// and level-based: the same input always gives the same actions, so a
// restarted or second controller that observes the same Nomad decides the
// same thing, and deterministic job IDs plus check-and-set registration turn
// any race between them into a no-op.
//
// # Replica lifecycle
//
// A model with replicas = N has replica slots <model>-0 … <model>-(N-1). A
// slot is served by managed jobs; each job runs the slot on one profile,
// identified by the profile's fingerprint, at one generation. For each slot,
// in catalog order:
//
//   - Jobs of a model that left the catalog, or of a slot ≥ N, are stopped.
//   - A job is current when its profile is still in the model and its
//     fingerprint matches the profile's; otherwise it is stale.
//   - Among current jobs outside any drain hold, the best one is kept —
//     serving over starting over partly placed over failed, then the oldest —
//     and the others are stopped as duplicates.
//   - No current job outside drain holds: a new job is placed (a new
//     generation, above that of every job Nomad still holds for the slot,
//     stopped ones included, so that its ID is free). Stale jobs, and current jobs inside a drain hold, keep
//     running until the kept job serves, then they are stopped: new copy
//     first, for rolls and for drains alike.
//   - A kept job that failed, or stayed partly placed past the deadline, is
//     placed again: same job, new decision, registered over its current
//     version. When the new decision is the same place, nothing is done
//     (Nomad's own rescheduling is already at work there).
//
// Everything that still runs counts in the budgets and spread before
// anything new is placed, and a placement is committed to the planner before
// the next one is decided, so one pass never over-commits a budget.
//
// # Autoscaled models
//
// A model with an autoscale policy has the slots its jobs hold, any index
// below its max, rather than 0 … N-1; its count is what Input.Want asks,
// within its min and max (scale.go). With any such model in the catalog a
// pass stops, first, the slots a scale down gives up (those that serve
// least, then those whose loss keeps the spread widest); plans every
// existing slot as above; then places the floors (fixed models' missing
// slots, autoscaled models' min) by priority, and then each priority's
// growth, shared in proportion to what each model lacks. A model that fits
// nowhere may take the place of a lower priority's replicas above that
// model's floor: its Create comes first, their Stops after it, naming it
// (Action.Yields). Result.Scale says, per model, what it wanted, had and
// got, and what stopped it. Without an autoscaled model a pass is as
// before, and priorities play no part.
package reconcile
