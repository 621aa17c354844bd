# ACL policy for the llmgw controller's Nomad token:
#   nomad acl policy apply -description "llmgw controller" llmgw jobs/llmgw-acl.hcl
#   nomad acl token create -name llmgw -policy llmgw
namespace "default" {
  # Register, update and stop the replica jobs; read their allocations and evaluations.
  capabilities = ["list-jobs", "read-job", "submit-job", "read-logs"]

  # Holds, decisions and the leader lock live under llmgw/.
  variables {
    path "llmgw/*" {
      capabilities = ["write", "read", "destroy", "list"]
    }
  }
}

# Read nodes, their devices and client stats (power); write dynamic node
# metadata for `llmgw ctl label`.
node {
  policy = "write"
}

agent {
  policy = "read"
}
