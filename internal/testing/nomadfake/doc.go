// Package nomadfake is the controller tier's test double: an httptest
// server that answers the subset of the Nomad 2.0 HTTP API llmgw's
// controller uses, for the real client github.com/hashicorp/nomad/api. It
// imports testing and httptest and must only be imported by tests.
//
//	s := nomadfake.New(nomadfake.WithAutoRun(true))
//	defer s.Close()
//	s.AddNode(nomadfake.NodeSpec{Name: "n1", Meta: map[string]string{"llmgw.rack": "r01"},
//		Devices: []nomadfake.DeviceGroup{nomadfake.NvidiaGPUs("NVIDIA H200", 700, 143771, "GPU-0", "GPU-1")}})
//	c := s.Client(t) // *api.Client
//
// Paths, query parameters, JSON shapes, status codes and error texts follow
// Nomad 2.0.5's HTTP agent and servers; where the fake simplifies, this page
// says so.
//
// # Indexes and blocking queries
//
// One raft-like index grows by one with every write (the first write is 2).
// As in Nomad, each state table (jobs, allocs, evals, nodes, variables)
// remembers the index of its last change, and every read answers
// X-Nomad-Index (a single object's ModifyIndex, or for lists and missing
// objects the table's index floored at 1), X-Nomad-KnownLeader: true and
// X-Nomad-LastContact: 0. With ?index=N a read blocks until its answer's
// index exceeds N: every write wakes it to re-run, a 404 blocks like any
// answer, ?wait bounds it (default 5m, capped at 5m as Nomad's
// MaxBlockingRPCQueryTime, no jitter), and it ends with the request's
// context or Close. Writes answer X-Nomad-Index. Client endpoints
// (/v1/client/...) set no index headers, as in Nomad. ?filter, ?per_page
// and ?next_token are answered 501; ?stale and ?region are ignored.
//
// # Endpoints faked
//
// Jobs:
//   - PUT/POST /v1/jobs and /v1/job/<id>: register. Canonicalize and the
//     servers' defaults (namespace, node pool "default", datacenters ["*"])
//     are applied, then EnforceIndex exactly as Nomad: index 0 only creates,
//     any other must equal the job's JobModifyIndex, else HTTP 500 with
//     "Enforcing job modify index N: job already exists", "...: job exists
//     with conflicting job modify index: M" or "...: job does not exist".
//     The check and the write are atomic, so of concurrent create-only
//     registrations exactly one wins. An unchanged spec (Nomad's
//     SpecChanged) makes no new version and answers the job's ModifyIndex
//     as JobModifyIndex, but still creates an evaluation.
//   - GET /v1/jobs (?prefix, ?meta=true adds Meta to the stubs, ?namespace
//     with "*"), GET /v1/job/<id>, DELETE /v1/job/<id>?purge=: stop (a new
//     version with Stop) or purge; a missing job deregisters as a no-op.
//   - GET /v1/job/<id>/allocations?all= (without all, only the allocations
//     of the job's current incarnation), /evaluations, /summary; PUT
//     /v1/job/<id>/evaluate.
//
// Allocations: GET /v1/allocations (?prefix, ?resources=true,
// ?task_states=false), GET /v1/allocation/<id> (with its Job),
// GET /v1/node/<id>/allocations.
//
// Evaluations: GET /v1/evaluations (?prefix, ?filter_job_id,
// ?filter_eval_status), GET /v1/evaluation/<id> (?related=true follows the
// Previous/Next/Blocked links), GET /v1/evaluation/<id>/allocations.
//
// Nodes: GET /v1/nodes (stubs as Nomad's, without Meta; ?resources=true adds
// NodeResources, ?os=true the os.name attribute), GET /v1/node/<id>, PUT
// /v1/node/<id>/drain (starts or cancels a drain; MarkEligible) and
// /v1/node/<id>/eligibility (refused while draining, as in Nomad).
//
// Dynamic node metadata: GET /v1/client/metadata?node_id= and POST (body
// NodeMetaApplyRequest, ?node_id wins over its NodeID): the client's merge,
// static meta overridden by dynamic, a nil value removing a dynamic key or
// masking a static one (kept as a nil dynamic value); keys must be dotted
// HCL identifiers. The node's Meta changes at once (in Nomad it reaches the
// servers with the client's next node update).
//
// Client stats: GET /v1/client/stats?node_id= answers HostStats whose
// DeviceStats are shaped as nomad-device-nvml reports them: one group per
// vendor/type/name, InstanceStats per device ID with Summary and
// Stats.Attributes["power_draw"] = {FloatNumeratorVal: watts,
// FloatDenominatorVal: the group's power_limit attribute, Unit "W"}. Draw is
// 0 W until SetPowerDraw. Unknown node: 404 `Unknown node "<id>"`; a down
// node: 404 "No path to node". Memory and CPU stats are placeholders.
//
// Allocation checks: GET /v1/client/allocation/<id>/checks answers the
// nomad-provider checks of the allocation's group services as a client
// does (AllocCheckStatuses by check ID): "success" while the allocation
// runs healthy, "failure" while it runs unhealthy, none before it runs or
// after it ends; an unknown allocation 404 "Unknown allocation", its node
// down 404 "No path to node".
//
// Variables: GET/PUT/DELETE /v1/var/<path>, GET /v1/vars (?prefix,
// ?namespace with "*"). ?cas=N checks and sets as Nomad's state store (0:
// only if absent; conflict: HTTP 409 whose body is the current variable, or
// a zero variable when it is absent). Deletes answer 204. Items are
// required, 64 KiB at most; paths match ^[a-zA-Z0-9-_~/]{1,128}$. Locks:
// PUT ?lock-acquire (defaults TTL 15s and LockDelay 15s; TTL between 10s
// and 24h; the body's lock ID, or a new one; like Nomad it overwrites the
// items with the request's), ?lock-renew, ?lock-release.
// Another holder's acquire, a renewal with a wrong or expired ID, and a
// release with a wrong ID answer 409, which api.Locks maps to
// ErrLockConflict. Writes and deletes of a locked variable without its lock
// ID answer 409. As Nomad's lock timers do, a lock expires 2×TTL after its
// last acquire or renewal (renewals then fail) and is released LockDelay
// after that; the clock is WithClock's and is read at every request and by
// Tick. ACLs are off, so every caller sees locks as a management token does.
//
// GET /v1/status/leader answers a fixed address. Everything else answers
// 501 "nomadfake: <method> <path> is not faked".
//
// # The scheduler
//
// Registration, deregistration and forced evaluation run a synchronous,
// deterministic evaluation (Nomad's reconciler and generic scheduler,
// reduced):
//   - A stopped or purged job's live allocations are stopped: DesiredStatus
//     stop, "alloc not needed due to job update", ClientStatus complete at
//     once (there is no client to wait for).
//   - Allocations of a group that went away or an index at or above the
//     count are stopped the same way. A new job version updates an
//     allocation in place when only the group's count, update, scaling,
//     reschedule or migrate blocks changed; any other change to the group,
//     or to the job's meta, constraints, datacenters or node pool, stops it
//     ("alloc is being updated due to job update") and places a replacement
//     linked by PreviousAllocation/NextAllocation: a destructive update
//     without rolling, canaries or deployments.
//   - Every evaluation fills every empty slot <job>.<group>[i]: a failed,
//     lost or (for service jobs) complete allocation is replaced by the
//     next evaluation of its job ("alloc was rescheduled because it
//     failed"), with no reschedule delays or attempt limits. Failures do
//     not trigger evaluations unless AutoReschedule is on.
//   - A placement considers the nodes in the job's node pool ("all" for
//     any) and datacenters (globs with *) that are ready, eligible and not
//     draining, in name order, and takes the first that passes, in Nomad's
//     order: job constraints, task drivers ("missing drivers"), group and
//     task constraints, device presence (healthy instances in total:
//     "missing devices"), distinct_hosts, then device capacity (free healthy
//     instances: exhausted as "devices: no devices match request"). There is
//     no scoring: affinities and spreads are ignored, and CPU, memory, disk
//     and ports are not checked. Device requests match "<type>",
//     "<vendor>/<type>" or "<vendor>/<type>/<name>"; instances are taken in
//     the node's order. Dynamic ports are numbered from 20000 per node.
//   - Constraint targets: literals, ${node.unique.id}, ${node.unique.name},
//     ${node.datacenter}, ${node.class}, ${node.pool}, ${attr.X}, ${meta.X}.
//     Operators: =, ==, is, !=, not, <, <=, >, >= (numeric when both sides
//     parse), regexp, set_contains, set_contains_all, set_contains_any,
//     is_set, is_not_set, and distinct_hosts at job or group level. Others
//     (version, semver, distinct_property), device constraints, system and
//     sysbatch jobs, periodic and parameterized jobs are refused at
//     registration with 501.
//   - A group that cannot be placed gets an AllocationMetric in the
//     evaluation's FailedTGAllocs, as Nomad fills it (NodesEvaluated,
//     NodesFiltered, NodesInPool, NodePool, NodesAvailable,
//     ConstraintFiltered keyed by "<LTarget> <Operand> <RTarget>" or the
//     reasons above, ClassFiltered, NodesExhausted, DimensionExhausted,
//     CoalescedFailures for further failures of the same group), and
//     QueuedAllocations counts them. The evaluation completes and links a
//     new blocked evaluation ("queued-allocs", "created to place remaining
//     allocations"). Placements that fit are made anyway: no gang placement.
//   - Blocked evaluations are retried, oldest first, after anything that may
//     add capacity: a node added or changed (status, eligibility, drain,
//     device health, meta) or an allocation ending. A newer evaluation of
//     the job cancels an older blocked one.
//   - Job status is Nomad's: running with a live allocation, pending with a
//     blocked evaluation, dead otherwise; its change bumps ModifyIndex.
//
// Allocations start pending with no task states; SetAllocStatus and AutoRun
// move them as a client would (task events Received, Task Setup, Started;
// Terminated and Not Restarting on failure; Killed on stop; deployment
// health), AddTaskEvent adds driver events, SetNodeStatus "down" makes the
// node's live allocations lost.
//
// # Test controls
//
// New, URL, Close, Config, Client; AddNode, NvidiaGPUs, SetNodeStatus,
// SetDeviceHealth, SetPowerDraw, Node; RegisterJob (seeding without HTTP);
// SetAllocStatus, AddTaskEvent, Allocations, AutoRun, AutoReschedule;
// Variable; WithClock and Tick; Index; fault injection with FailNext
// (fail before applying), FailNextAfterApply (apply, then lose the answer)
// and DropConnection; Hook, called with each request before it is handled;
// Requests, the log of every request with its body and status.
//
// # Not faked
//
// ACLs and tokens, regions and federation, namespaces as objects (any name
// is accepted), deployments and canaries, job versions, plan, scale,
// dispatch, periodic force, service registrations (the service catalog),
// allocation stop, restart, signal, exec and file system, node purge and
// drain progress (a drain never migrates allocations or completes by
// itself), CSI and host volumes, the event stream, operator and agent
// endpoints, gzip responses, bexpr filters and pagination.
package nomadfake
