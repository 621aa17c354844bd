# Nomad client agent configuration for a GPU node running llmgw's two
# plugins: nomad-device-nvml (GPUs as Nomad devices) and nomad-driver-llmgw
# (driver = "llmgw"). Copy both binaries, and llmgw-supervisor (the driver's
# per-task supervisor, which no plugin block names), into plugin_dir, then merge this
# into the client's configuration. Settings are shown with their defaults
# unless the comment says otherwise.

plugin_dir = "/opt/nomad/plugins"

client {
  enabled = true

  meta {
    "llmgw.site" = "ams1"
    "llmgw.room" = "a"
    "llmgw.row"  = "r01"
    "llmgw.rack" = "r01-k01"
    "llmgw.pdu"  = "p01-k01-a"
  }
}

plugin "nomad-device-nvml" {
  config {
    fingerprint_period = "1m"
    health_events      = true
    health_recovery    = "5m"
    # mock { system = "dgxh200" seed = "node-1" }   # laptops, demos, CI only
  }
}

plugin "nomad-driver-llmgw" {
  config {
    # Executables of each engine. Unset entries are looked up on the
    # client's PATH: vllm, python3 (run as `python3 -m
    # sglang.launch_server`; any other program is taken to be a launcher
    # accepting launch_server's arguments), text-generation-launcher,
    # llama-server. A task's `command` overrides these.
    engines {
      vllm     = "/opt/vllm/bin/vllm"              # example, not a default
      sglang   = "/opt/sglang/bin/python3"         # example, not a default
      # tgi      = "text-generation-launcher"
      # llamacpp = "llama-server"
    }

    # HF_HOME for engines whose task does not set it, so that every engine
    # on the node shares one download cache. No default.
    model_cache = "/var/lib/llmgw/models"

    # Readiness defaults for tasks whose ready block does not set them.
    ready_timeout  = "30m"
    ready_interval = "1s"

    # How long an engine the driver stops by itself (it missed its
    # readiness deadline) gets between SIGTERM and SIGKILL.
    stop_timeout = "30s"

    # Environment for every engine; the task's environment wins.
    extra_env = {
      # VLLM_USAGE_STATS_SERVER = ""   # example
    }

    # cgroup v2 directory under which each engine gets its own cgroup, so
    # that OOM kills are detected and stray workers are killed with the
    # engine. "" disables it. Needs a unified (v2) cgroup hierarchy.
    cgroup_parent = "/sys/fs/cgroup/llmgw.slice"
  }
}
