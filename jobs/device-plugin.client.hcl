# Nomad client agent configuration for llmgw's NVML device plugin.
# Copy nomad-device-nvml into plugin_dir, then merge this into the client's
# configuration. Every setting is shown with its default.

plugin_dir = "/opt/nomad/plugins"

client {
  enabled = true

  # Where this node sits; llmgw's placement and power budgets use these.
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
    # GPUs (or MIG instances) by UUID that Nomad must not schedule.
    ignored_gpu_ids = []

    # How often NVML is rescanned for attribute changes (power limit,
    # MIG layout, driver upgrade) and for devices that stopped answering.
    fingerprint_period = "1m"

    # Watch NVML events (critical XIDs, double-bit ECC) for health.
    health_events = true

    # XIDs caused by applications, not by the GPU: they do not make a
    # device unhealthy.
    ignored_xids = [13, 31, 43, 45, 68, 109]

    # A device marked unhealthy by an event is healthy again after this long
    # with no new critical event, if it answers NVML. "0s": never by itself.
    health_recovery = "5m"

    # Hold the GPUs' power limits where llmgw's controller says (Nomad
    # variables <variable_prefix>/<node_name> and <variable_prefix>/_heartbeat),
    # falling back to safe caps when its heartbeat stops for a lease. Leave
    # the block out and the plugin sets no limit. Needs root for NVML.
    # power_caps {
    #   nomad_addr      = "http://127.0.0.1:4646"  # default: NOMAD_ADDR, else this
    #   token_file      = "/etc/nomad.d/caps.token" # default: NOMAD_TOKEN, else none
    #   namespace       = "default"
    #   node_name       = "gpu-17"                 # default: the host name
    #   variable_prefix = "llmgw/power-caps"
    #   lease           = "45s"
    #   fallback_watts  = 400                      # default: none, keep the last cap
    # }

    # For laptops, demos and CI: serve go-nvml's mock DGX systems instead of
    # real NVML. Leave this block out on GPU nodes.
    # mock {
    #   system      = "dgxh200"     # dgxa100 | dgxh100 | dgxh200 | dgxb200
    #   gpus        = 8             # how many to show (default: all 8)
    #   power_watts = 280           # draw each mock GPU reports (default: 40% of its limit;
    #                               # with draw = "load", the idle draw, default 10%)
    #   draw        = "fixed"       # "load": draw follows the CPU load of the GPU's processes
    #   deny_power_limit = false    # true: setting a power limit fails (no permission)
    #   seed        = "node-1"      # makes UUIDs unique per node; use the node name
    #   mig         = { "7" = ["3g.71gb", "3g.71gb"] }  # GPU index -> MIG profiles
    #   events_file = "/tmp/nvml-events"  # append "<UUID> xid 79" or "<UUID> ecc" to inject faults
    # }
  }
}
