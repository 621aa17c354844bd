# Problems of every kind, each reported at its line.
listen = "localhost"
priority = 50.5
datacenters = []

driver {
  ready_timeout  = "soon"
  check_interval = "5s"
  check_timeout  = "10s"
  engines        = { trtllm = "/bin/x" }
}

reconcile {
  lost_after = "25h"
}

autoscale {
  interval = "2m"
  timeout  = "10ms"
  gateways = ["gw:8080", "http://a:1", "http://a:1"]
  prometheus {
    model_label = "served-model"
    waiting     = "  "
  }
}
