# ACL policy for the llmgw gateway's Nomad token: what `llmgw gateway
# --nomad` reads (docs/gateway.md, "Discovery" and "Scale to zero"). Attach
# it to the gateway's job (jobs/llmgw-gateway.nomad.hcl, whose task gets its
# workload identity as NOMAD_TOKEN):
#
#   nomad acl policy apply -namespace default -job llmgw-gateway \
#     llmgw-gateway jobs/llmgw-gateway-acl.hcl
#
# or to a token of its own:
#
#   nomad acl policy apply -description "llmgw gateway" llmgw-gateway jobs/llmgw-gateway-acl.hcl
#   nomad acl token create -name llmgw-gateway -policy llmgw-gateway
#
# With --namespace other than "default", rename the block (and with
# --models-namespace, give that namespace the variables block).

namespace "default" {
  # read-job: the service registrations (GET /v1/services,
  # /v1/service/<name>), each allocation's check results
  # (GET /v1/client/allocation/<id>/checks) and, when a registration has no
  # results yet, its allocation's job (GET /v1/allocation/<id>).
  capabilities = ["read-job"]

  variables {
    # The controller's model list (--models-variable): the models known
    # with no replica registered, which may be at zero.
    path "llmgw/models" {
      capabilities = ["read"]
    }

    # The API keys, with --keys-variable llmgw/gateway-keys (docs/gateway.md,
    # "Access control"): hashes only, but whoever may write them decides who
    # uses the gateway, so the gateway only reads.
    path "llmgw/gateway-keys" {
      capabilities = ["read"]
    }
  }
}
