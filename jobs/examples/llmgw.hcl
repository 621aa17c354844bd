# llmgw.hcl: the llmgw controller's configuration (llmgw controller --config llmgw.hcl).
#
# Every value below is the default except node_base_watts and driver.env; an empty
# file works too. Relative paths are relative to this file's directory. The nomad
# block falls back to NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION, NOMAD_NAMESPACE,
# NOMAD_CACERT, NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY, NOMAD_TLS_SERVER_NAME and
# NOMAD_SKIP_VERIFY, as Nomad's CLI does. env("NAME") reads an environment variable.
# See docs/controller.md, "Configuration".

nomad {
  address = "http://127.0.0.1:4646"
  # token     = env("NOMAD_TOKEN")   # needs the llmgw ACL policy
  # region    = "global"            # jobs are registered here...
  # namespace = "default"           # ...and here
  # tls {
  #   ca_file     = "tls/nomad-ca.pem"
  #   cert_file   = "tls/cli.pem"
  #   key_file    = "tls/cli-key.pem"
  #   server_name = "server.global.nomad"
  #   insecure    = false
  # }
}

# Only with service_provider = "consul".
# consul {
#   address = "127.0.0.1:8500"
#   token   = env("CONSUL_HTTP_TOKEN")
# }

# The controller's HTTP API (and /metrics).
listen = "127.0.0.1:9797"

# Set it, and every API call (reads too; not /healthz, /metrics or the console's
# files) needs "Authorization: Bearer <token>" (llmgw ctl: LLMGW_TOKEN). Without it
# the API refuses every write (holds, labels, reloads, plans, pins) and its reads
# are open.
# api_token = env("LLMGW_API_TOKEN")

# Development only: writes without a token, from this host only. Refused with
# api_token, or with a listen address that is not loopback; logged as a warning.
# insecure_writes = false

catalog  = "catalog.hcl"
facility = "facility.hcl"

# Where replicas register their services: "nomad" or "consul".
service_provider = "nomad"

# Where rendered jobs may run; "*" is every datacenter.
datacenters = ["*"]

# Draw of a node without GPU work (CPUs, memory, fans, NICs), in watts, for nodes
# whose client meta sets no llmgw.base_watts. An H200 server idles at about 1.2 kW.
node_base_watts = 1200

# Defaults of every rendered engine task.
driver {
  ready_interval = "1s"  # readiness probe interval
  ready_timeout  = "30m" # how long an engine may take to load
  kill_timeout   = "60s" # SIGTERM to SIGKILL; raise the clients' max_kill_timeout to match
  shutdown_delay = "15s" # deregistered, still serving, while the gateway drains it
  check_interval = "10s" # the service's HTTP check
  check_timeout  = "5s"
  env = {
    DO_NOT_TRACK = "1"
  }
  # Executables per engine, overriding the driver plugin's (task config command):
  # engines = { vllm = "/opt/vllm/bin/vllm" }
}

reconcile {
  interval         = "30s" # a full pass at least this often
  partial_deadline = "10m" # a replica partly placed this long is placed anew
}

# Where the autoscaler reads the signals of the catalog's autoscaled models
# (docs/controller.md, "Signals"). Without the block: every 5s, each read
# within 5s, the gateways found as llmgw-gateway in service_provider's catalog.
# autoscale {
#   interval = "5s"
#   timeout  = "5s"
#   gateways = ["http://10.0.0.5:8080"]   # gateways in no catalog
#   prometheus {                           # optional: a query per signal it replaces
#     address     = "http://prometheus:9090"
#     model_label = "model"
#     waiting     = "sum by (model) (llmgw_engine_requests_waiting)"
#   }
# }

# Where the GPUs' draw is read besides Nomad's client stats (docs/power.md,
# "Where the draw is read"): a Prometheus server scraping NVIDIA's
# dcgm-exporter. Without the block every GPU node's client stats are read
# each power_interval, 20 a second at most.
# power_source {
#   prometheus {
#     address               = "http://prometheus:9090"
#     selector              = "DCGM_FI_DEV_POWER_USAGE" # a series selector, W, one per GPU
#     uuid_label            = "UUID"                    # "uuid" with --use-old-namespace
#     max_age               = "1m"                      # an older sample: that node's client stats
#     client_stats_interval = "10m"                     # limits and cap state still read this often
#   }
# }
