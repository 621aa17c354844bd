// Package render turns one placed replica — a catalog model and profile
// and the facility's Decision — into the Nomad job that runs it, as a typed
// *api.Job. It is pure: no I/O, no logging, no clock; the same input gives
// the same job, byte for byte, which is what makes the job ID and the
// controller's check-and-set registration idempotent. ParseMeta is the
// inverse the controller uses to adopt jobs after a restart.
//
// # The job
//
// One service job per replica, ID JobID(replica, fingerprint, generation) =
// "llmgw-<replica>-<fp[:8]>-g<gen>". The fingerprint
// (facility.ProfileFingerprint, computed here from the model and profile,
// never taken from the caller) changes when anything that runs changes, so a
// changed profile renders a new job beside the old one; the generation,
// chosen by the reconciler, does the same for a copy of an unchanged profile
// (moving out of a drained domain). The controller stops the old job once
// the new one serves. Re-placing a job in place (same ID, new decision) is a
// re-registration of the same ID over its current version.
//
// Job meta: llmgw.managed = "true", llmgw.model, llmgw.profile,
// llmgw.replica, llmgw.profile_fp, llmgw.gen, llmgw.domain (the decision's scope,
// FormatScope: "site=ams1,room=a,row=r01,rack=r01-k01,pdu=p01-k01-a"),
// llmgw.shards (task groups), llmgw.nodes (the node of each shard, in
// order, so that a replica whose shards are not all placed yet can still be
// rebuilt and checked against its decision) and llmgw.render
// (RenderVersion). Each group carries llmgw.shard and llmgw.node.
//
// The job runs in the profile's node pool ("default" unless set; "all" for
// any), in Settings.Datacenters ("*" unless set).
//
// # Placement constraints
//
// Hard constraints pin the decided domain at every level of its scope,
// ${meta.llmgw.site} = ams1 … ${meta.llmgw.pdu} = p01-k01-a, and each task
// group (shard-0 … shard-N-1, count 1) to the node the facility chose,
// ${node.unique.name} = <node>. Nomad then only checks that the node still
// fits; if an operator relabels a node out of its domain, or the node goes,
// the job becomes unplaceable instead of landing where the facility did
// not account for it, and the controller re-places the replica.
//
// A multi-node replica also gets distinct_hosts (belt and braces: the
// groups are already pinned to distinct nodes) and, when its nodes are on
// an RDMA fabric, ${meta.llmgw.fabric} = <the nodes' fabric> and
// ${meta.llmgw.hcas} is_set: every shard stays on one fabric, and the
// node's HCAs reach the engine as NCCL_IB_HCA = ${meta.llmgw.hcas} in the
// task's env block. That is interpolated by Nomad on the node when the task
// starts (task env interpolation leaves an unknown variable as written and
// never fails, unlike the task config's); the is_set constraint makes sure
// there is something to interpolate. Nodes with no fabric at all (a lab)
// get neither.
//
// # The task
//
// One task, "engine", driver "llmgw", with the driver's task config: engine,
// model (the catalog's source), model_file (the model's file, for an engine
// that loads one local file: llama.cpp), command (only when
// Settings.Commands names one for the engine), args (the profile's, as
// they are), port = "http", ready { path interval timeout }, env
// (Settings.Env, then the profile's env over it), and the replica's layout
// resolved by its engine's descriptor (facility.Profile.ResolvedLayout):
// tensor_parallel always, pipeline_parallel, data_parallel and
// expert_parallel when above 1. They are replica-wide: SGLang's
// tensor_parallel = 16 over two nodes of 8, vLLM's 8 × pipeline 2. The
// driver renders each engine's own flags from them (engine.Build), once:
// the profile's args may not set them.
//
// served_model_name = the catalog's model name for engines with a
// served-name flag (vLLM and SGLang --served-model-name, llama.cpp
// --alias), so that requests for the model's name reach it. TGI has no
// such flag at the pinned version; its OpenAI-compatible routes ignore the
// request's model field, so the gateway's routing by name works without
// one (its /v1/models lists the source id). Every engine gets
// LLMGW_SERVED_MODEL_NAME in its environment.
//
// Resources: cores = cpu_cores (whole cores, as the facility counts them;
// cpu = 1000 MHz when the profile asks for none), memory = memory_gb × 1024
// MiB (4 GiB when none), and device "nvidia/gpu/<profile.gpu>" with count =
// gpus, which the nomad-device-nvml plugin (or Nomad's own NVIDIA plugin)
// fingerprints by product name.
//
// Each group has a host network with a dynamic port "http"; shard 0 of a
// multi-node replica also has "dist", its rendezvous port.
//
// # Service
//
// Shard 0 (the leader, which serves the API) registers the group service
// ServiceName(model) = "llmgw-<model>" (as an RFC 1123 label: Nomad and
// Consul refuse dots in service names, so "llama-3.1-8b" registers as
// "llmgw-llama-3-1-8b"; the tags carry the exact names) on port http, tags
// llmgw, model=<model>, profile=<profile>, replica=<id>, provider from the
// settings, with an HTTP check named "ready" on the engine's readiness path.
// The check has check_restart { limit = 3, grace = ready timeout + 1m }:
// during loading the driver's own readiness deadline is the watchdog (a
// check would fail for the whole load), after it an engine that stops
// answering three checks in a row is restarted.
//
// # Multi-node replicas: rank and leader
//
// Every shard's env block holds LLMGW_NNODES, LLMGW_NODE_RANK (its group
// index; 0 is the leader) and LLMGW_LEADER_HOST, LLMGW_LEADER_PORT,
// LLMGW_LEADER_ADDR (host:port). On shard 0 they are its own dist port,
// ${NOMAD_IP_dist} and friends, and shard 0 registers the service
// DistServiceName(replica) = "llmgw-<replica>-dist" on that port. The
// other shards have a template (env = true, change_mode = "restart")
// reading that service from the same provider (nomadService, or Consul's
// service), which sets the three LLMGW_LEADER_* variables; template env
// overrides the task's env block. Each shard's task config has nodes = N,
// node_rank = R and leader_addr = "${LLMGW_LEADER_ADDR}", which Nomad
// interpolates, and from which the driver renders the engine's multi-node
// flags (the descriptor's MultiNode):
//
//	SGLang: --nnodes N --node-rank R --dist-init-addr HOST:PORT
//	vLLM:   --nnodes N --node-rank R --master-addr HOST --master-port PORT,
//	        and --headless for R > 0; with data_parallel > 1 instead
//	        --data-parallel-size-local D/N --data-parallel-address HOST
//	        --data-parallel-rpc-port PORT, and --headless
//	        --data-parallel-start-rank R×D/N for R > 0
//
// A command engine reads the same variables from its environment. Ranks
// above 0 are probed for readiness where they serve HTTP (SGLang's health
// server) and get ready { skip = true } where they serve none (vLLM's
// headless ranks, the command engine's).
//
// Nomad has no ordering between groups, and a service template does not
// block on an empty service list (consul-template renders it empty), so a
// shard may start before the leader is registered (group services register
// as the leader's allocation starts, before its engine loads, so the window
// is short). Until then the task env block gives LLMGW_LEADER_HOST =
// LeaderUnknownHost, a name under .invalid that never resolves: the engine
// fails at once with that name in its error, rather than hanging on a wrong
// address, and the template restarts the task as soon as the leader's
// service appears. The same restart happens when the leader moves (new
// allocation, new port), which a torch.distributed group needs anyway; the
// restart policy's render_templates keeps a restarted shard from keeping a
// stale address.
//
// # Lifecycle settings, for engines that load for many minutes
//
//   - ready { interval, timeout } (Settings; 1s and 30m by default): the
//     driver probes the engine until it serves; a model that has not loaded
//     by the timeout is stopped and the task fails with the reason.
//   - restart { attempts = 2, delay = 30s, interval = max(30m, 2 × ready
//     timeout), mode = "fail" }: a crash is retried twice on the node (an
//     NCCL timeout, a transient download error), spaced so that a crash loop
//     does not hammer a model cache; the interval spans at least two loads
//     so that repeated load failures add up. Then the allocation fails
//     rather than looping forever ("delay" mode), so that the failure is
//     visible to Nomad's rescheduler and to the controller.
//   - reschedule { unlimited, exponential, delay 1m, max_delay 30m }: the
//     groups are pinned, so a reschedule is a restart on the same node with
//     back-off; when the node is gone the replacement is unplaceable and
//     the controller re-places the replica elsewhere. Unlimited, because
//     giving up is the controller's decision, not Nomad's.
//   - update { max_parallel 1, health_check "checks", min_healthy_time 30s,
//     healthy_deadline = ready timeout + 5m, progress_deadline = ready
//     timeout + 15m, auto_revert false, canary 0 }: an in-place update (new
//     settings, same profile) waits for the readiness check, which only
//     passes after the model has loaded; the deadlines sit above the ready
//     timeout so that a slow but healthy load is not declared failed, and
//     the progress deadline above the healthy one, as Nomad requires.
//     auto_revert is off: a job version the controller did not write would
//     only be overwritten again; a failed deployment shows in its status.
//     Profile changes do not go through update at all: they get a new job.
//   - kill_timeout (60s by default): engines free GPU memory, flush and
//     close NCCL communicators on SIGTERM; 5s (Nomad's default) cuts that
//     short. Nomad caps it at the client's max_kill_timeout, 30s unless the
//     client config raises it (client { max_kill_timeout = "2m" }).
//   - shutdown_delay (group, 15s by default): a stopping shard's service is
//     deregistered first and the engine keeps serving for this long, so the
//     gateway, which watches the catalog, stops sending it requests before
//     it goes. Every shard has it, so the followers outlive the leader's
//     drain.
//
// Node drains are not migrations: the groups are pinned, so the controller
// moves replicas (a hold with drain), a new copy first.
package render
