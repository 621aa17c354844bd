# gateway.hcl: the llmgw gateway's configuration (llmgw gateway --config gateway.hcl).
#
# Every setting is a flag of `llmgw gateway`, named here with "_" for "-"
# (--breaker-max-open is breaker_max_open). A flag given on the command line
# wins over this file, the file over the environment (NOMAD_ADDR,
# NOMAD_NAMESPACE), that over the built-in default; --consul or --nomad on the
# command line picks the source whatever this file says. Every value below is
# the default: an empty file works too. env("NAME") reads an environment
# variable. Tokens and TLS come from the usual environment (NOMAD_TOKEN,
# CONSUL_HTTP_TOKEN, ...). See docs/gateway.md, "Configuration".

listen = "127.0.0.1:8080" # loopback; ":8080" serves every interface

# Discovery: Nomad's service registrations (the default), or Consul's health
# API with `consul = "127.0.0.1:8500"` instead; not both.
# nomad   = "http://127.0.0.1:4646" # default: NOMAD_ADDR, else this
# namespace = "default"             # default: NOMAD_NAMESPACE, else "default"; "*" for all
check_interval    = "5s" # with Nomad: how often allocations' checks are read
check_timeout     = "2s" # ...the longest one allocation's check read may take
check_parallelism = 8    # ...the most check reads in flight at once

# With Consul: the gateway registers itself as llmgw-gateway.
# advertise = "gw.example:443" # default: the listen address
register                = true
register_tags           = []    # besides llmgw-gateway
register_check_interval = "10s" # its HTTP check on /healthz
consul_wait             = "5m"  # the longest one blocking query waits

# Requests. The gateway reads every body whole, within its route's limit
# (413 past it), and checks its JSON before a replica sees it.
max_body_chat_completions = 4194304   # bytes: about a million tokens of text
max_body_completions      = 4194304
max_body_embeddings       = 4194304
max_json_depth            = 64        # nesting of objects and arrays (400 past it)
body_read_timeout         = "30s"     # the longest a body may take to arrive (408 past it)
body_memory               = 268435456 # bytes all request bodies together may hold (503 past them)
attempts                = 3         # replicas one request may be tried on
no_replica_retry_after  = "5s"      # Retry-After of a 503 for a model with no healthy replica
dial_timeout            = "2s"
response_header_timeout = "10m"     # keep it above your longest non-streamed generation

# Replica engines' /metrics, read to weigh replicas by every gateway's load
# (requests waiting and running), not this gateway's alone; "0s" turns it off.
engine_metrics_interval = "5s"

# Scale to zero. The controller writes the catalog's models into a Nomad
# variable; a model that may be at zero (min 0) is known and listed in
# /v1/models with no replica, and its requests are held until a replica is
# ready, then sent in arrival order, at most wake_burst at once per replica.
hold_timeout    = "2m"           # the longest a request is held (then 503); "0s": none
hold_per_model  = 256            # the most held for one model (then 503)
hold_total      = 4096           # ...for all models together
wake_burst      = 16             # held requests in flight at once per ready replica
models_variable = "llmgw/models" # "": read no model list
# models_namespace = "default"             # default: namespace, "default" when that is "*"
# models_nomad     = "http://127.0.0.1:4646" # with consul: the Nomad to read the list from

# Demand (GET /llmgw/v1/demand): the span of its arrival rate and TTFT p90.
demand_window = "30s"

# Routing (docs/gateway.md, "Prefix routing"): a model's policy, over the
# model list's (the catalog's routing); least-outstanding when neither says.
# routing = ["chat=prefix"]  # MODEL=POLICY: prefix or least-outstanding
prefix_load_factor         = 2 # with prefix, pass over a replica above 2x its share of the requests in flight
prefix_history_load_factor = 4 # the same for a chat turn that continues a conversation (its history is there)
prefix_opening_limit       = 0 # a chat opening a conversation waits while its replica holds this many (0: engine slots + 1)
prefix_opening_wait        = "30s" # for at most this long, then it is sent anyway ("0s": none waits)

# Circuit breakers, one per replica.
breaker_failures = 5
breaker_open     = "5s"
breaker_max_open = "1m"

# Access control (docs/gateway.md, "API keys"). Without keys_file or
# keys_variable anyone who reaches the gateway may use every model: keep it
# on loopback then.
# keys_file      = "/etc/llmgw/gateway-keys.hcl" # see gateway-keys.hcl; re-read on change and SIGHUP
# keys_variable  = "llmgw/gateway-keys"          # or: item "keys" of this Nomad variable, watched
# keys_namespace = "default"                     # its namespace; default: namespace
# share_limits   = true                          # enforce 1/N of each key's limits, N the llmgw-gateway registrations
share_limits = false

# Browsers (docs/gateway.md, "CORS"): the origins whose web pages may call the
# gateway. None by default: a request carrying an Origin header is refused
# with 403, and the engines' own Access-Control-* headers never pass through.
# cors_origins = ["https://chat.example.com"] # or ["*"]: any page
cors_origins = []

# TLS: both or neither; re-read when they change and on SIGHUP.
# tls_cert_file = "/etc/llmgw/gateway.crt"
# tls_key_file  = "/etc/llmgw/gateway.key"

log_level = "info"
