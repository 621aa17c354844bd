# ACL policy for the llmgw controller's Nomad token: exactly what the
# controller reads and writes (docs/controller.md, "Nomad ACL").
#
# Run as the Nomad job jobs/llmgw-controller.nomad.hcl, attach it to the
# job: the task's workload identity (NOMAD_TOKEN) then carries it, and no
# token is handed out. e2e/nomadway_test.go runs it so.
#
#   nomad acl policy apply -namespace default -job llmgw-controller \
#     llmgw-controller jobs/llmgw-acl.hcl
#
# Run otherwise (systemd, jobs/systemd/llmgw-controller.service), give it to
# a token of its own:
#
#   nomad acl policy apply -description "llmgw controller" llmgw jobs/llmgw-acl.hcl
#   nomad acl token create -name llmgw -policy llmgw
#
# It fits the default configuration: jobs in the "default" namespace
# (nomad.namespace) and the allocations of every namespace read
# (nomad.namespaces = ["*"]). With another nomad.namespace, rename the
# "default" block. e2e/acl_test.go runs a controller on this file against
# a Nomad with ACLs on.
#
# Not granted, because the controller never calls them: agent (no
# /v1/agent/* call), read-logs and read-fs (no task logs or files), operator,
# quota, plugin, host_volume (rendered jobs mount no volume). The gateway has
# a token of its own.

namespace "default" {
  # list-jobs:  the job list it watches (GET /v1/jobs?prefix=llmgw-&meta=true).
  # read-job:   a job before stopping it and after a write with no answer
  #             (GET /v1/job/<id>); the evaluations of a job Nomad could not
  #             place, for explain (GET /v1/job/<id>/evaluations); the
  #             allocations of its jobs (GET /v1/allocations) and their service
  #             check results (GET /v1/client/allocation/<id>/checks, checked
  #             in the allocation's namespace); the llmgw-gateway
  #             registrations the autoscaler reads demand from
  #             (GET /v1/service/llmgw-gateway).
  # submit-job: register, update and stop its jobs (PUT /v1/jobs, a stop is a
  #             check-and-set re-registration with Stop set, not a DELETE).
  capabilities = ["list-jobs", "read-job", "submit-job"]

  variables {
    # Run-time holds (PUT/DELETE /v1/facility/holds/...): read, then a
    # check-and-set write.
    path "llmgw/holds" {
      capabilities = ["read", "write"]
    }
    # Pins of autoscaled models' counts (PUT/DELETE /v1/models/<m>/pin): read
    # each pass, then check-and-set writes; the leader removes expired ones.
    path "llmgw/pins" {
      capabilities = ["read", "write"]
    }
    # Each replica's last decision: written every pass that changes it, read
    # by GET /v1/replicas/<id>, listed and deleted once the replica leaves
    # the catalog (store.PruneDecisions). Nomad's "read" includes "list";
    # beware that a list without it answers empty, not 403.
    path "llmgw/decisions/*" {
      capabilities = ["read", "write", "destroy"]
    }
    # The model list for the gateways (gateway.ModelsVariable): written
    # after a pass when the catalog's models or counts changed (PUT
    # /v1/var/llmgw/models). Gateways read it with a token of their own.
    path "llmgw/models" {
      capabilities = ["write"]
    }
    # The leader lock: acquire, renew and release are writes
    # (PUT /v1/var/llmgw/leader?lock-acquire|lock-renew|lock-release); a lock
    # held by another controller answers 409 without read.
    path "llmgw/leader" {
      capabilities = ["write"]
    }
  }
}

# The allocations of every other namespace (nomad.namespaces = ["*"]): GPUs
# held by any allocation on the nodes are taken. Listing allocations needs
# read-job only. Without this block Nomad still answers the "*" list, with
# only the namespaces the token may read: the GPUs of the others would
# silently look free.
namespace "*" {
  capabilities = ["read-job"]
}

# With nomad.namespaces listing names instead, e.g.
#   nomad { namespaces = ["default", "ml-batch"] }
# replace the namespace "*" block above with one read-job block for each
# listed namespace besides nomad.namespace (a listed namespace the token may
# not read stops placement, with the 403 in the controller's log):
#
# namespace "ml-batch" {
#   capabilities = ["read-job"]
# }

# node read: the node list and each node (GET /v1/nodes, /v1/node/<id>:
# devices, meta, drain, eligibility) and their GPU power
# (GET /v1/client/stats?node_id=). write: dynamic node metadata for
# `llmgw ctl label` (POST /v1/client/metadata); "read" is enough for a
# controller whose labels are set otherwise.
node {
  policy = "write"
}
