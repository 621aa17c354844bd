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
    # llama-server. A task's `command` overrides these when allowed (below).
    engines {
      vllm     = "/opt/vllm/bin/vllm"              # example, not a default
      sglang   = "/opt/sglang/bin/python3"         # example, not a default
      # tgi      = "text-generation-launcher"
      # llamacpp = "llama-server"
    }

    # HF_HOME for engines whose task does not set it, so that every engine
    # on the node shares one download cache; also the node's model store,
    # where tasks with a weights block (a catalog model's weights) are
    # fetched once for the node. No default.
    model_cache = "/var/lib/llmgw/models"

    # The model store: the hub (or a mirror or an internal proxy that speaks
    # its download protocol) weights blocks fetch from; what the store may
    # hold (models no task uses are evicted, least recently used first;
    # 0: the disk's free space); fetches at once on the node; the node's
    # fetch bandwidth in bytes a second, shared by those (0: unbounded).
    # hub_url                = "https://huggingface.co"
    # store_budget_bytes     = 0
    # max_concurrent_fetches = 2
    # fetch_bytes_per_second = 0

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

    # Each engine runs in a cgroup v2 of its own that enforces the task's
    # resources (cpu -> cpu.weight, cores -> cpuset.cpus, memory ->
    # memory.max, memory_max -> memory.max with memory.low = memory), and
    # detects OOM kills. It goes in Nomad's partition of the task's cgroup
    # (nomad.slice/share.slice or reserve.slice) on a cgroup v2 client
    # (nomad_cgroup), else under cgroup_parent ("" disables that).
    nomad_cgroup  = true
    cgroup_parent = "/sys/fs/cgroup/llmgw.slice"
    # "enforce": a task whose resources the host cannot enforce (cgroup v1,
    # a missing controller) is refused. "best_effort": it starts, with an
    # event naming what is not enforced.
    resource_limits = "enforce"
    # Also cap cpu with cpu.max (otherwise cpu is a weight).
    cpu_hard_limit = false

    # Which executables tasks may run. Each engine's own (the engines block
    # above, or its default on the client's PATH) is allowed for that
    # engine; a task's `command` elsewhere must match allowed_commands
    # (absolute paths or globs; symlinks are resolved before comparing).
    allowed_commands  = []   # e.g. ["/opt/vllm-*/bin/vllm", "/opt/llmgw/bin/fake-engine"]
    allow_any_command = false

    # Who engines run as: default_user, or the task's `user` where
    # allowed_users names it; never root unless allow_root. A dedicated
    # user (useradd --system --create-home --home-dir /var/lib/llmgw llmgw)
    # is better than nobody. Nomad's data_dir must be traversable by it
    # (chmod 0711 <data_dir>).
    default_user  = "nobody"
    allowed_users = []
    allow_root    = false
    # Added to every engine's groups: the group of a shared model cache
    # (install -d -o llmgw -g llmgw-models -m 2775 /var/lib/llmgw/models).
    supplementary_groups = []   # e.g. ["llmgw-models"]

    # Variables a job may not set in the engine's environment (the client's
    # own values pass), unless allowed_env names them.
    env_denylist = ["LD_*", "GCONV_PATH", "BASH_ENV", "ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE"]
    allowed_env  = []
  }
}

# Nomad (1.10.2 and later) asks drivers for task stats only when it
# publishes allocation metrics: without this, `nomad alloc status -stats`
# has no CPU or memory figures for llmgw tasks and the driver reads no
# engine metrics (docs/driver.md, "Engine metrics"; the controller reads
# them either way). Not a default: Nomad's is false.
telemetry {
  publish_allocation_metrics = true
  collection_interval        = "1s"
}
