# The llmgw gateway as a Nomad job: one OpenAI-compatible endpoint over the
# replicas the controller places (docs/gateway.md). Its service,
# llmgw-gateway, is how the controller finds the gateways
# (gatewayclient.NomadGateways) and reads each one's demand
# (GET /llmgw/v1/demand). Run one allocation per node you want an entry
# point on (var.gateways, a static port: one per node); clients reach it at
# the node's address and var.port.
#
#   nomad acl policy apply -namespace default -job llmgw-gateway \
#     llmgw-gateway jobs/llmgw-gateway-acl.hcl
#   nomad job run -var llmgw_bin=/opt/llmgw/bin/llmgw jobs/llmgw-gateway.nomad.hcl
#
# How it reaches Nomad: identity { env = true } gives the task its workload
# identity as NOMAD_TOKEN and, beside it, NOMAD_UNIX_ADDR, the task API
# socket (secrets/api.sock) served by the node's own Nomad agent. Without
# --nomad the gateway uses that socket (before NOMAD_ADDR), with that
# token, which carries the policy attached to this job above; with ACLs
# off it works the same, unauthenticated.
#
# The binary: var.llmgw_bin on the clients (raw_exec, the default), or a
# release tarball (make dist) fetched by var.artifact_url into the task's
# local/ dir, with var.llmgw_bin naming llmgw inside it
# (local/llmgw_<version>_<os>_<arch>/llmgw); with the
# artifact, var.driver = "exec" runs it in a chroot (the socket is then
# /secrets/api.sock, which NOMAD_UNIX_ADDR says). docs/controller.md
# ("Running the controller and the gateway in Nomad") has both.
#
# e2e/gateway_test.go and e2e/autoscale_test.go run this file, and
# e2e/nomadway_test.go runs it beside jobs/llmgw-controller.nomad.hcl on a
# Nomad with ACLs on, with the binary from a tarball (artifact_url,
# artifact_checksum, llmgw_bin inside it) under driver = "exec".

variable "llmgw_bin" {
  type        = string
  default     = "/opt/llmgw/bin/llmgw"
  description = "the llmgw binary: a path on the clients, or inside the task dir with artifact_url (local/...)"
}

variable "artifact_url" {
  type        = string
  default     = ""
  description = "a release tarball to fetch and unpack into local/ (go-getter URL); empty: none, llmgw_bin is on the clients"
}

variable "artifact_checksum" {
  type        = string
  default     = ""
  description = "the tarball's checksum, as in make dist's checksum file (sha256:<hex>); empty: not checked"
}

variable "driver" {
  type        = string
  default     = "raw_exec"
  description = "raw_exec (llmgw_bin on the host) or exec (a chroot: use artifact_url)"
}

variable "nomad_addr" {
  type        = string
  default     = ""
  description = "the Nomad HTTP API to discover from; empty: the task API socket (NOMAD_UNIX_ADDR)"
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

    # Out of Nomad's service list (the controller's demand reads) before
    # the gateway is told to stop.
    shutdown_delay = "5s"

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
      driver       = var.driver
      kill_timeout = "15s"

      # NOMAD_TOKEN (the workload identity, carrying the job's policy) and
      # NOMAD_UNIX_ADDR (the task API socket).
      identity {
        env = true
      }

      dynamic "artifact" {
        for_each = var.artifact_url == "" ? [] : [var.artifact_url]
        content {
          source      = artifact.value
          destination = "local/"
          dynamic "options" {
            for_each = var.artifact_checksum == "" ? [] : [var.artifact_checksum]
            content {
              checksum = options.value
            }
          }
        }
      }

      config {
        command = var.llmgw_bin
        args = concat([
          "gateway",
          "--listen", ":${NOMAD_PORT_http}",
          "--log-level", "info",
          # Every interface: without keys, anyone who reaches the port may
          # use every model. To require API keys kept in a Nomad variable
          # (docs/gateway.md, "Access control"), add
          #   "--keys-variable", "llmgw/gateway-keys",
          # and read on that path in jobs/llmgw-gateway-acl.hcl.
        ], var.nomad_addr == "" ? [] : ["--nomad", var.nomad_addr])
      }

      resources {
        cpu    = 1000
        memory = 256
      }
    }
  }
}
