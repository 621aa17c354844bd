// Package nomadfake is the controller tier's test double: an httptest
// server that answers the part of the Nomad 2.0 HTTP API llmgw's
// controller calls, for the real client github.com/hashicorp/nomad/api, so
// that the tests of controller, controller/ui and cmd/llmgw/internal/cli/ctlcmd
// (through internal/testing/ctlharness, and ctltest on it) run fast and
// deterministically. It
// imports testing and httptest and must only be imported by tests.
//
//	s := nomadfake.New(nomadfake.WithAutoRun(true))
//	defer s.Close()
//	s.AddNode(nomadfake.NodeSpec{Name: "n1", Meta: map[string]string{"llmgw.rack": "r01"},
//		Devices: []nomadfake.DeviceGroup{nomadfake.NvidiaGPUs("NVIDIA H200", 700, 143771, "GPU-0", "GPU-1")}})
//	c := s.Client(t) // *api.Client
//
// A double that agrees with the code it tests proves nothing about Nomad,
// so the fake is kept in proportion: it stores what Nomad stores and
// answers in Nomad 2.0.5's paths, shapes, status codes and error texts,
// but models as little of Nomad's behaviour as the controller's tests
// need, and every behaviour it models is a case of the conformance suite,
// internal/testing/nomadfake/conformance: the same assertions, through the
// real API client, run against this fake (its TestFakeConformance, in
// `go test ./...`) and against Nomad 2.0.5 agents on loopback
// (e2e TestNomadFakeConformance, with NOMAD_BIN). Where the two disagree
// the fake is fixed, never the case. Where a test needs more of Nomad (its
// feasibility counters, its rescheduler), it says what Nomad would do
// with an explicit control (SetPlacementFailureMetric, Reschedule)
// instead of the fake computing it.
//
// # Indexes and blocking queries
//
// One raft-like index grows by one with every write (the first write is 2).
// As in Nomad, each state table (jobs, allocs, evals, nodes, variables)
// remembers the index of its last change, and every read answers
// X-Nomad-Index (a single object's ModifyIndex; for a list the table's
// index, 0 while the table was never written; for a missing object the
// table's index floored at 1), X-Nomad-KnownLeader: true and
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
//   - PUT/POST /v1/jobs and /v1/job/<id>: register. Canonicalize and the
//     servers' defaults (namespace, node pool "default", datacenters ["*"])
//     are applied, then EnforceIndex exactly as Nomad: index 0 only creates,
//     any other must equal the job's JobModifyIndex, else HTTP 500 with
//     "Enforcing job modify index N: job already exists", "...: job exists
//     with conflicting job modify index: M" or "...: job does not exist".
//     The check and the write are atomic, so of concurrent create-only
//     registrations exactly one wins. An unchanged spec (Nomad's
//     SpecChanged) makes no new version and answers the job's ModifyIndex
//     as JobModifyIndex, but still runs an evaluation (triggered by
//     job-register, a stopped job's too). Only service jobs
//     whose every group is pinned to a node (below) are accepted; others
//     are answered 501. A job is stopped by registering it with Stop set,
//     as the controller does.
//   - GET /v1/jobs (?prefix, ?meta=true adds Meta to the stubs, ?namespace
//     with "*"; stubs carry no JobSummary), GET /v1/job/<id>, GET
//     /v1/job/<id>/evaluations.
//   - GET /v1/allocations (?namespace with "*", ?resources=true adds
//     AllocatedResources, whose Shared.Ports hold the group's ports on
//     127.0.0.1, dynamic ones numbered from 20000; allocations carry no
//     task states).
//   - GET /v1/nodes (stubs without Meta, as Nomad's), GET /v1/node/<id>.
//   - POST /v1/client/metadata (body NodeMetaApplyRequest, ?node_id wins
//     over its NodeID): the client's merge, static meta overridden by
//     dynamic, a nil value removing a dynamic key or masking a static one
//     (kept as a nil dynamic value); keys must be dotted HCL identifiers.
//     The node's Meta changes at once, or with WithNodeMetaDelay that
//     long after the answer (in Nomad it reaches the servers with the
//     client's next node update); the answer has the new meta at once.
//   - GET /v1/client/stats?node_id=: HostStats whose DeviceStats are shaped
//     as nomad-device-nvml reports them: one group per vendor/type/name,
//     InstanceStats per device ID with Summary and
//     Stats.Attributes["power_draw"] = {FloatNumeratorVal: watts,
//     FloatDenominatorVal: the group's power_limit attribute, Unit "W"}.
//     Draw is 0 W until SetPowerDraw. Unknown node: 404 "Unknown node
//     <id>"; a down node: 404 "No path to node". Memory and CPU stats are
//     placeholders.
//   - GET /v1/client/allocation/<id>/checks: the nomad-provider checks of
//     the allocation's group services, as a client answers them
//     (AllocCheckStatuses by a 64-hex-digit check ID, Group the
//     allocation's name): "success" while it runs healthy,
//     "failure" while it runs unhealthy (SetAllocStatus, AutoRun), none
//     before it runs or after it ends; an unknown allocation 404 "Unknown
//     allocation", its node down 404 "No path to node".
//   - GET /v1/services (?namespace with "*") and GET /v1/service/<name>:
//     the service catalog of Nomad-provider services, as the gateway's
//     discovery and the controller's gateway lookup read it. Every
//     allocation running with desired status run is registered under its
//     group's nomad services, on 127.0.0.1 and the service's port, with
//     its tags; so is every AddService registration. The catalog's index
//     follows the allocations'. A stopped allocation is deregistered at
//     once; with WithShutdownDelay a running one keeps running until its
//     group's shutdown_delay has passed on the fake's clock (services.go),
//     as a Nomad client deregisters, waits, then signals.
//   - GET/PUT/DELETE /v1/var/<path>, GET /v1/vars (?prefix, ?namespace
//     with "*"). ?cas=N checks and sets as Nomad's state store (0: only if
//     absent; conflict: HTTP 409 whose body is the current variable, or a
//     zero variable when it is absent). Every accepted write is a new
//     ModifyIndex, unchanged items too. Deletes answer 204. Items are
//     required, 64 KiB at most; paths match ^[a-zA-Z0-9-_~/]{1,128}$.
//     Locks: PUT ?lock-acquire (defaults TTL 15s and LockDelay 15s; TTL
//     between 10s and 24h; the body's lock ID, or a new one; like Nomad it
//     overwrites the items with the request's), ?lock-renew,
//     ?lock-release. Another holder's acquire, a renewal with a wrong or
//     expired ID, and a release with a wrong ID answer 409, which
//     api.Locks maps to ErrLockConflict. Writes and deletes of a locked
//     variable without its lock ID answer 409. As Nomad's lock timers do, a
//     lock expires 2×TTL after its last acquire or renewal (renewals then
//     fail) and is released LockDelay after that; the clock is WithClock's
//     and is read at every request and by Tick. ACLs are off, so every
//     caller sees locks as a management token does.
//   - GET /v1/event/stream for the topics Node, Allocation and Job
//     (events.go): a batch per write, an event per changed object, its
//     payload the whole object (an allocation without its job); ?index
//     inclusive; a bounded buffer (WithEventBuffer, Nomad's 100 by
//     default) from which a lost index starts silently at the oldest
//     batch, and a subscriber that falls behind it is cut off;
//     heartbeats {} (WithEventHeartbeat). Other topics answer 501.
//
// Everything else answers 501 "nomadfake: <method> <path> is not faked".
//
// # Placement
//
// The controller renders every group pinned to the node the facility
// chose (render: a `${node.unique.name} = <node>` constraint), so the fake
// does not schedule. Each registration runs one evaluation at once, which
// completes:
//   - A stopped job's live allocations (desired run, client pending or
//     running) are stopped: DesiredStatus stop and, as there is no client
//     to wait for, ClientStatus complete at once (WithShutdownDelay: a
//     running one once its group's shutdown_delay has passed). So are the live
//     allocations of an older version: a new version replaces them all.
//     Nomad does the same for every update the controller writes, since
//     each changes the job's meta (llmgw.nodes, llmgw.watts), which Nomad's
//     tasksUpdated counts as destructive.
//   - Each slot <job>.<group>[i] without a live allocation of the current
//     version gets one, pending, on the group's pinned node, if that node
//     is ready, eligible and not draining and holds, for every device
//     request ("<type>", "<vendor>/<type>" or "<vendor>/<type>/<name>"),
//     enough healthy instances no live allocation holds; they are taken in
//     the node's order. The allocation carries the tasks' devices, CPU
//     shares and memory.
//   - A group that cannot be placed gets, in the evaluation's
//     FailedTGAllocs, the metric SetPlacementFailureMetric set (zero
//     otherwise), and the job is pending until an evaluation places it.
//
// Job status is running with a live allocation, and running too while a
// slot is unplaced (Nomad 2.0.5 holds a blocked evaluation and shows the
// job running, not pending, as conformance.HeldDevicesNotGiven and
// NodeDownLosesAllocations assert; a node going down leaves its pinned
// slots unplaced), dead otherwise; its change bumps ModifyIndex.
//
// # What is modelled, and the real-Nomad test behind it
//
// Every point below is a case of the conformance suite (named in
// brackets), run against the fake and against Nomad 2.0.5. The fake's own
// tests check it further against the fake; the tests named here are those
// that rely on it, and the e2e tests that exercise it through llmgw.
//   - Indexes and blocking queries [IndexesAndHeaders,
//     BlockingQueryWakesOnWrite, BlockingQueryWaitBounds,
//     BlockingQueryOnMissingObject]: every controller test (the
//     controller's watches); e2e: every controller test, TestChaos
//     (server restarts).
//   - Check-and-set registration and its texts, SpecChanged, validation
//     texts [RegisterCreatesVersionZero, RegisterEnforceIndex,
//     RegisterCreateOnlyRace, RegisterUnchangedSpec,
//     RegisterValidationErrors]:
//     TestCrashDuringPlacement, TestPassWaitsForItsOwnWrites, the leader
//     tests; e2e TestControllerKilledMidPlacementLeavesNoDuplicates (every
//     slot registered exactly once), TestControllerRestartAdoptsWithoutRegistering.
//   - Stop by registration; stopped jobs stay listed; list ?prefix and
//     ?meta [StopByRegistration, JobListPrefixAndMeta]: TestOrphanStopped,
//     TestModelRemovedAndReAdded, TestDuplicateReplicaKeepsTheServingJob,
//     TestProfileChangeRollsNewFirst; e2e
//     TestControllerDrainHoldMovesReplicasNewFirst (old jobs stopped and
//     still listed, nothing left running in the held rack).
//   - Placement on the pinned node, on GPUs no live allocation holds
//     [PlacementOnPinnedNode, HeldDevicesNotGiven]:
//     every controller test, the ctltest tables (GPUs free per node); e2e
//     TestControllerPlacesCatalogInRealNomad,
//     TestControllerMultiNodeReplicaStaysInOneRack (one allocation per
//     shard on the nodes the controller chose), TestControllerWithACLs
//     (GPUs another namespace's job holds).
//   - Unhealthy instances are not given, and the unplaced group's
//     evaluation carries FailedTGAllocs [UnhealthyDeviceNotGiven,
//     HeldDevicesNotGiven]: TestNomadReasonsInExplain, whose
//     metric is set with SetPlacementFailureMetric; e2e
//     TestControllerNomadReasonsInExplain (the same metric from Nomad, no
//     allocation), TestControllerWithACLs (an exhausted node in the
//     explain).
//   - A new version replaces the live allocations; every evaluation fills
//     empty slots [NewVersionReplacesAllocations, PlacementOnPinnedNode]:
//     TestNodeDownReplacesReplicaAtOnce,
//     TestNodeDownWaitsForLostAfter; e2e
//     TestControllerNodeLossReplacesReplica (the same job re-registered
//     serves on the other node), TestControllerNodeLossWaitsForLostAfter.
//   - A node down loses its allocations [NodeDownLosesAllocations]; a
//     disconnected one keeps them (not yet in the suite: it needs a
//     group disconnect block on the real side):
//     TestNodeDownReplacesReplicaAtOnce, TestNodeDownWaitsForLostAfter;
//     e2e TestControllerNodeLossReplacesReplica,
//     TestControllerNodeLossWaitsForLostAfter.
//   - Device health on the node [UnhealthyDeviceNotGiven]:
//     TestUnhealthyGPUMovesReplicaNewCopyFirst;
//     e2e TestDeviceHealthInRealNomad, TestChaos (gpu-fail: the replica is
//     moved off the GPU).
//   - Checks follow the allocation [AllocationChecks]; the service
//     catalog follows running allocations [ServiceCatalog; the
//     WithShutdownDelay order is e2e/autoscale_test.go's]: every test that
//     serves (ctlharness's
//     CaughtUp reads them as the controller does); e2e: the controller
//     serves on Nomad's own check results in every controller test
//     (checksPass in e2e/faults_test.go reads them).
//   - Client stats power [ClientStatsDevices]: the ctltest tables (each
//     node's measured draw);
//     e2e TestControllerBudgetLeavesReplicaUnplaced (the measured draw of
//     the plugin's stats).
//   - Nodes and dynamic node metadata [NodeListAndInfo, DynamicNodeMeta]:
//     ctlcmd's and the console's label tests; e2e
//     TestControllerWithACLs (labels through the controller).
//   - Variables, check-and-set, locks and their timers
//     [VariablesCheckAndSet, VariablesValidation, VariableLocks,
//     VariableLockExpiry]: the store, leader,
//     stalled-leader and crash tests; e2e
//     TestControllerKilledMidPlacementLeavesNoDuplicates (the killed
//     controller's lock lapses), TestChaos (controller kill -9),
//     TestControllerWithACLs.
//   - Blocking reads of one variable across its write and its delete
//     [VariableBlockingRead]: the device plugin's power caps tests
//     (devices/caps_test.go).
//   - The event stream's topics, keys, payloads, inclusive index, and a
//     lost index starting at the oldest buffered write
//     [EventStreamFollowsChanges, EventStreamLostIndex]: the
//     controller's watches (controller/stream.go) in every controller
//     test; the cut-off of a subscriber that fell behind is Nomad's
//     ("event dropped from buffer", nomad/stream) but not in the suite.
//   - Job status [RegisterCreatesVersionZero, StopByRegistration,
//     HeldDevicesNotGiven, NodeDownLosesAllocations]: only the tests' own
//     budget check reads it (a dead job
//     draws nothing); e2e's jobHistory reads Nomad's the same way.
//
// Dropped, as no test relied on it or nothing real asserted it: Nomad's
// feasibility checks other than the node pin (job, group and task
// constraints, datacenters, node pools, drivers, distinct_hosts), scoring,
// the FailedTGAllocs counters, queued allocations, blocked evaluations and
// their retry when capacity frees, in-place updates, rescheduling of
// failed and lost allocations (Reschedule stands in), task states and
// events, deployment health (the controller reads checks, see
// controller/health.go), allocation links and descriptions, dynamic ports,
// batch jobs; the endpoints listed above as not faked.
//
// # Test controls
//
// New, URL, Close, Config, Client; AddNode, NvidiaGPUs, SetNodeStatus,
// SetDeviceHealth, SetPowerDraw, Node; RegisterJob (seeding without HTTP);
// SetAllocStatus, Reschedule, Allocations, AutoRun and WithAutoRun,
// AddService, WithShutdownDelay,
// SetPlacementFailureMetric; Variable; WithClock and Tick; Index;
// EndEventStreams (a server restart, to the event stream) and
// HoldEventStreams (a stream lagging behind); fault
// injection with FailNext (fail before applying), FailNextAfterApply
// (apply, then lose the answer) and DropConnection; Hook, called with each
// request before it is handled; Requests, the log of every request with
// its body and status (none WithoutRequestLog); Traffic, the requests
// and response bytes by endpoint.
//
// # Not faked
//
// ACLs and tokens, regions and federation, namespaces as objects (any name
// is accepted), deployments and canaries, job versions and history,
// deregistration and purge, plan, scale, dispatch, periodic jobs, service
// deletion and Consul-provider services, allocation reads, stop, restart,
// signal, exec and file system, evaluation reads, node drain, eligibility
// and purge, CSI and host volumes, operator, status and
// agent endpoints, gzip responses, bexpr filters and pagination, the event
// stream's topics other than Node, Allocation and Job, and its events for
// deletions (the fake deletes nothing).
package nomadfake
