// Package driver is llmgw's Nomad task driver (driver = "llmgw"): it turns
// a task config (engine, model, args, port, ready, tensor_parallel, env)
// into an inference engine's command line through package engine, binds it
// to the GPUs Nomad allocated, runs it under a per-task supervisor (package
// supervisor) so that it outlives the plugin and the Nomad client, and
// reports readiness, load progress, exit, logs and stats to Nomad.
//
// # Task life cycle
//
//	StartTask ──▶ running, not ready ──probe 2xx──▶ running, ready
//	                 │        │                          │
//	                 │   ready.timeout: SIGTERM,         │
//	                 │   SIGKILL after stop_timeout      │
//	                 ▼        ▼                          ▼
//	              exited (exit.json written by the supervisor)
//
// The plugin never owns the engine: it starts the supervisor in a new
// session and from then on only reads the supervisor's files in the task's
// state dir (<alloc>/<task>/private/llmgw/<task>-<invocation>/) and signals
// the engine's process group, after checking the pid against the start
// time recorded in driver_state. So RecoverTask needs nothing but the
// handle Nomad persisted: it verifies the supervisor by pid and start time,
// reads ready.json (readiness already reported), events.offset (events
// already reported), exit.json (the engine exited while no plugin
// watched) and stop.json (a readiness-timeout stop under way, with its
// SIGKILL deadline, which the recovered task keeps), and resumes.
//
// # When a process dies
//
// The engine's workers hold GPU memory and do not die with their parent,
// so: when the engine exits, the supervisor (a child subreaper, so every
// orphan comes back to it) kills its process group, its cgroup and every
// remaining descendant, and records the exit only once they are gone.
// When the supervisor is SIGKILLed, the engine dies of its parent-death
// signal (forked from a thread that never exits), and the driver, which
// notices the supervisor gone without an exit record (at once, at the
// next poll, or at RecoverTask), kills what is left in the supervisor's
// session, the engine's process group and its cgroup (supervisor.Cleanup)
// and removes the cgroup. docs/driver.md has the table of cases.
//
// # Policy
//
// StartTask checks a task against the plugin's policy before it launches
// anything (policy.go): its executable, made canonical, must be its
// engine's own or match allowed_commands (unless allow_any_command); it
// runs as default_user or an allowed task user, never root without
// allow_root; the job may not set env_denylist variables; and its
// resources become cgroup v2 limits that the supervisor writes before it
// forks the engine, refusing (resource_limits = "enforce") when the host
// cannot enforce them. Each refusal is a "Not started: …" task event and
// a non-recoverable error naming the field and the option that would
// allow it.
//
// # Events
//
// Task events go to every TaskEvents stream: "Started <engine> on GPUs …:
// <command line>", load progress the supervisor recognised in the log
// (each quarter of the weight shards), "Ready after 93s" (with the GPU
// memory the engine's processes hold, where NVML is present), "Not ready
// after 30m0s: stopping the engine", and for an exit nobody asked for
// "Engine exited with code 1 before it was ready: <last output lines>".
//
// # GPU memory
//
// Nomad's TaskStats carry CPU and memory only, so the GPU memory of the
// engine's process tree (NVML's compute processes on the task's GPUs)
// goes to InspectTask attributes, the Ready event and a rate-limited
// event when it later changes for good (gpu.go). Without NVML the driver
// logs that once and reports none.
package driver
