# The llmgw controller as a Nomad job (docs/controller.md, "Running the
# controller and the gateway in Nomad"). Two allocations, on different
# nodes when there are two: both watch Nomad and serve the same view, one
# leads (the Nomad Variable lock llmgw/leader) and only it writes jobs. When
# it stops, it releases the lock and the next controller to try takes it
# (the standby, which tries every 7.5 s, or the replacement Nomad places);
# when it dies, the lock lapses first (its 15 s TTL, then 15 s of lock
# delay). The new leader adopts the replicas' jobs as they are: no
# duplicate, no rewrite. `nomad var get llmgw/leader` names the leader
# (holder: "<host>:<pid> alloc <allocation ID>").
#
# Once, with a management token:
#
#   nomad acl policy apply -namespace default -job llmgw-controller \
#     llmgw-controller jobs/llmgw-acl.hcl
#   nomad var put nomad/jobs/llmgw-controller \
#     catalog=@catalog.hcl facility=@facility.hcl config=@llmgw-extra.hcl
#   nomad job run -var llmgw_bin=/opt/llmgw/bin/llmgw jobs/llmgw-controller.nomad.hcl
#
# Then a catalog change is a Variable update: `nomad var put -force
# nomad/jobs/llmgw-controller catalog=@catalog.hcl facility=@facility.hcl
# config=@llmgw-extra.hcl` (every key: put replaces the items). Nomad
# renders the files again and sends SIGHUP, on which the controller reloads
# its catalog and facility (a bad file is refused and the old ones stay in
# force: its log and llmgw_config_reload_failed say so). A config change restarts
# the task instead: the rest of llmgw.hcl is read at start only.
#
# The Variable's keys:
#   catalog   the catalog file (required: a Variable without it renders
#             "<no value>", which the controller refuses at catalog.hcl:1)
#   facility  the facility file (optional: none, no budgets)
#   config    llmgw.hcl's settings besides listen, catalog and facility,
#             which this job sets (optional): driver, reconcile, autoscale,
#             datacenters, nomad { namespaces = ... }, ...; and api_token,
#             without which the API refuses every write (holds, labels,
#             reloads, plans, pins): the job listens on its allocation's
#             address, where insecure_writes is refused
# The task's workload identity may read nomad/jobs/llmgw-controller with no
# policy (Nomad grants a job its own path); the template waits until the
# Variable exists.
#
# How it reaches Nomad: identity { env = true } puts the workload identity
# in NOMAD_TOKEN and the task API socket in NOMAD_UNIX_ADDR, which the
# controller uses when llmgw.hcl has no nomad.address (before NOMAD_ADDR).
# The token carries the policy attached above. NOMAD_NAMESPACE is this
# job's namespace: the controller manages jobs there unless config sets
# nomad.namespace.
#
# The binary: var.llmgw_bin on the clients (raw_exec, the default), or a
# release tarball (make dist) fetched by var.artifact_url into local/, with
# var.llmgw_bin naming llmgw inside it, local/llmgw_<version>_<os>_<arch>/llmgw
# (var.driver = "exec" then runs it in
# a chroot).
#
# e2e/nomadway_test.go runs this file on a Nomad with ACLs on, setting only
# llmgw_bin (raw_exec, the binary on the host).

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

variable "controllers" {
  type        = number
  default     = 2
  description = "allocations: one leads, the others stand by"
}

job "llmgw-controller" {
  type = "service"

  group "controller" {
    count = var.controllers

    # Out of the llmgw-controller service before the task is told to stop
    # (a leader then releases the lock, for another to take at its next
    # try).
    shutdown_delay = "2s"

    # Standbys on other nodes than the leader where there are any.
    spread {
      attribute = "${node.unique.id}"
    }

    network {
      port "http" {}
    }

    # The controller's API (llmgw ctl, the console, /metrics). Both
    # allocations serve it; the standby's view is the leader's.
    service {
      name     = "llmgw-controller"
      provider = "nomad"
      port     = "http"
      tags     = ["llmgw-controller"]

      check {
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "controller" {
      driver = var.driver
      # Time for a leader to finish its pass's writes and release the lock.
      kill_timeout = "20s"

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

      # llmgw.hcl: what the job decides (where the API listens, where the
      # files are), then the Variable's config. Read at start: a change
      # restarts the task.
      template {
        destination = "local/llmgw.hcl"
        change_mode = "restart"
        data        = <<-EOT
          listen   = "{{ env "NOMAD_ADDR_http" }}"
          catalog  = "catalog.hcl"
          facility = "facility.hcl"
          {{ with nomadVar "nomad/jobs/llmgw-controller" }}{{ (index . "config").Value }}{{ end }}
        EOT
      }

      # The catalog and the facility: a change is a reload (SIGHUP).
      template {
        destination   = "local/catalog.hcl"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = "{{ with nomadVar \"nomad/jobs/llmgw-controller\" }}{{ .catalog }}{{ end }}"
      }

      template {
        destination   = "local/facility.hcl"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = "{{ with nomadVar \"nomad/jobs/llmgw-controller\" }}{{ (index . \"facility\").Value }}{{ end }}"
      }

      config {
        command = var.llmgw_bin
        args    = ["controller", "--config", "local/llmgw.hcl", "--log-level", "info"]
      }

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}
