# Every field of the controller's configuration, set to a value other than
# its default (config_golden_test.go parses it; env("...") reads the test's
# environment).
nomad {
  address    = "https://nomad.example:4646"
  token      = env("LLMGW_NOMAD_TOKEN")
  region     = "eu"
  namespace  = "ml-serving"
  namespaces = ["default", "ml-serving", "ml-batch"]
  event_stream = false
  tls {
    ca_file     = "tls/ca.pem"
    cert_file   = "/etc/nomad/cli.pem"
    key_file    = "tls/cli-key.pem"
    server_name = "server.eu.nomad"
    insecure    = true
  }
}

consul {
  address = "https://consul.example:8501"
  token   = "c0nsul"
}

listen           = "0.0.0.0:8080"
api_token        = env("LLMGW_API_TOKEN")
catalog          = "models/catalog.hcl"
facility         = "/srv/llmgw/facility.hcl"
service_provider = "consul"
datacenters      = ["ams1-a", "ams1-b"]
priority         = 70
node_base_watts  = 1200.5

driver {
  ready_interval = "2s"
  ready_timeout  = "45m"
  kill_timeout   = "90s"
  shutdown_delay = "20s"
  check_interval = "15s"
  check_timeout  = "3s"
  env            = { HF_HOME = "/srv/hf", HF_HUB_OFFLINE = "1" }
  engines        = { vllm = "/opt/vllm/bin/vllm", command = "/usr/local/bin/fake-engine" }
}

reconcile {
  interval          = "1m"
  partial_deadline  = "20m"
  lost_after        = "2m"
  max_stops         = 4
  max_stop_fraction = 0.25
}

autoscale {
  interval = "2s"
  timeout  = "1500ms"
  gateways = ["http://10.0.0.5:8080", "https://gw.example"]
  prometheus {
    address      = "http://prometheus.example:9090"
    model_label  = "served_model"
    outstanding  = "sum by (served_model) (llmgw_gateway_outstanding_requests)"
    queued       = "sum by (served_model) (llmgw_gateway_queued_requests)"
    arrivals     = "sum by (served_model) (rate(llmgw_gateway_arrivals_total[1m]))"
    ttft_p90     = "max by (served_model) (llmgw_engine_ttft_p90_seconds)"
    waiting      = "sum by (served_model) (llmgw_engine_requests_waiting)"
    kv_cache_use = "avg by (served_model) (llmgw_engine_kv_cache_usage)"
  }
}

power_source {
  prometheus {
    address               = "http://prometheus.example:9090"
    selector              = "DCGM_FI_DEV_POWER_USAGE{job=\"dcgm-exporter\"}"
    uuid_label            = "uuid"
    max_age               = "90s"
    client_stats_interval = "30m"
  }
}
