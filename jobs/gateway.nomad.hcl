# The llmgw gateway as a Nomad job. Its service is how the controller finds
# the gateways (gateway.NomadGateways: Nomad's registrations of
# llmgw-gateway) and reads each one's demand (GET /llmgw/v1/demand). Run
# one allocation per node you want an entry point on; clients reach it at
# the node's address and var.port.
#
#   nomad job run -var llmgw_bin=/opt/llmgw/bin/llmgw jobs/gateway.nomad.hcl
#
# With ACLs on, the task's workload identity (identity { env = true } puts
# it in NOMAD_TOKEN) carries the gateway's policy, attached to this job:
#
#   nomad acl policy apply -namespace default -job llmgw-gateway \
#     llmgw-gateway jobs/llmgw-gateway-acl.hcl
#
# e2e/gateway_test.go runs this file (with its variables set) against a
# real Nomad.

variable "llmgw_bin" {
  type        = string
  default     = "/opt/llmgw/bin/llmgw"
  description = "the llmgw binary on the clients"
}

variable "nomad_addr" {
  type        = string
  default     = "http://127.0.0.1:4646"
  description = "the Nomad HTTP API the gateway discovers from: the node's own agent by default"
}

variable "port" {
  type    = number
  default = 8080
}

variable "gateways" {
  type        = number
  default     = 1
  description = "allocations, each on its own node (the static port)"
}

job "llmgw-gateway" {
  type = "service"

  group "gateway" {
    count = var.gateways

    network {
      port "http" {
        static = var.port
      }
    }

    service {
      name     = "llmgw-gateway"
      provider = "nomad"
      port     = "http"
      tags     = ["llmgw-gateway"]

      check {
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "gateway" {
      # The binary as installed on the client; with the exec driver, mount
      # it into the task's chroot instead.
      driver       = "raw_exec"
      kill_timeout = "15s"

      identity {
        env = true
      }

      config {
        command = var.llmgw_bin
        args = [
          "gateway",
          "--listen", ":${NOMAD_PORT_http}",
          "--nomad", var.nomad_addr,
          "--log-level", "info",
        ]
      }

      resources {
        cpu    = 1000
        memory = 256
      }
    }
  }
}
