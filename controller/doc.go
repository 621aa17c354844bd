// Package controller is llmgw's external controller: it turns the model
// catalog into Nomad jobs placed with the data centre in mind, and keeps
// them so.
//
// It is level-based. Observers keep a snapshot of Nomad — nodes (location
// meta, devices, eligibility), allocations, llmgw's jobs — current through
// blocking queries, and of each GPU node's measured power through client
// stats. A reconcile pass reads the snapshot, the catalog and facility
// files and the run-time holds (Nomad Variables), asks the pure reconciler
// (controller/reconcile) what to change, and does it: render a job
// (controller/render) and register it with check-and-set, re-register a job
// over its known version, or deregister one. Because job IDs are
// deterministic and every registration is check-and-set, a pass that is
// interrupted, retried, or run by a second controller at the same time
// never creates a duplicate.
//
// Adoption before placement: no pass runs until every observer has loaded
// Nomad's state once, so a restarted controller rebuilds every replica from
// the jobs and all their allocations before it places anything.
//
// A pass never acts on a job list older than the controller's own writes:
// each registration and deregistration reports the index it was written
// at, and the next pass waits (ErrBehind) until the job list has reached
// it; a write whose answer was lost is read back first. Otherwise a pass
// run between a registration and the list showing it would count that
// job's draw nowhere and could place another replica into the budget it
// already uses. A check-and-set conflict means the plan counted a job
// where Nomad holds another version of it, so the pass places nothing
// more and leaves it to the next. New jobs take a generation above every
// job Nomad still holds for the replica, stopped ones included, so that
// their IDs are free (a stopped job keeps its ID until garbage
// collection).
//
// One controller leads, holding the Nomad Variable lock llmgw/leader; the
// others observe and serve the read API (they plan without acting, to keep
// their view current), and take over when the leader's lock lapses.
//
// Controller is the composition root: New builds its parts, Run starts
// their loops, Handler serves the API from them. Each part has its own
// type, file and lock, which guards only that part's fields: the files in
// force (files.go), the observer and its snapshot (observer.go,
// health.go), the leader and its lease (leader.go), the writer and what
// the next pass waits for (writer.go), the autoscaler's state
// (scalestate.go), the engine readings (engines.go) and the published
// view (view.go), built by a pure view builder (viewbuild.go). A pass
// holds passMu and takes the parts' locks under it; nothing else holds
// two at once. Options.Now is the controller's clock; what stays on the
// wall clock is listed there.
package controller
