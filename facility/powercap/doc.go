// Package powercap learns what shards draw and decides GPU power caps that
// keep every budgeted domain under its limit (docs/power.md, "Power caps").
//
// Learner keeps, per learned key (model, profile, GPU model), the samples
// of the last window in a log-scale histogram per twelfth of the window,
// and gives a percentile and the number of samples it rests on: the
// facility.Learned a measured budget counts.
//
// Allocator decides, from each budgeted domain's limit, its nodes' base
// draw and its GPUs (priority, draw, floor, maximum limit), which GPUs to
// cap and at what, lower priorities first and never below a floor, so that
// the domain stays under its limit even if every GPU draws up to its cap
// or, uncapped, its maximum limit. It engages a domain when its measured
// draw nears the limit and lifts when it has stayed well under for a hold
// time. Fallback gives the caps a node keeps when it loses the controller.
//
// It is pure, as facility is: no I/O, no goroutines, no clock (times are
// given), so the controller, the node's agent and the simulation run the
// same code.
package powercap
