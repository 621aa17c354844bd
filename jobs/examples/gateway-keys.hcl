# gateway-keys.hcl: the llmgw gateway's API keys (llmgw gateway --keys-file
# gateway-keys.hcl, or the text of this file as item "keys" of a Nomad
# variable with --keys-variable). Only each secret's hash is stored: make a
# key with
#
#   llmgw gateway hash-key --new --name team-a >> gateway-keys.hcl
#
# (the secret goes to stderr, once), or hash one you have with
# `printf '%s' "$SECRET" | llmgw gateway hash-key`. Clients send the secret
# as `Authorization: Bearer SECRET` (or `api-key: SECRET`). The gateway reads
# this file again when it changes and on SIGHUP; a file with any problem is
# refused whole (its errors name file:line) and the keys in force stay.
# See docs/gateway.md, "API keys".

key "team-a" {
  # sha256 of "sk-example-team-a" (an example: never use it)
  hash = "sha256:e15d388571c6cc808017b58600f644309709d68ec20ef11c132b99ac48e92a66"

  # The models it may use; leave models out for every model.
  models = ["llama-3.1-8b", "bge-m3"]

  # Limits, each at least 1; leave one out for no limit. With several
  # gateways and share_limits, each enforces its share (docs/gateway.md).
  requests_per_minute = 600
  tokens_per_minute   = 200000 # prompt + completion, from the answers' usage
  max_concurrency     = 16     # requests in flight (held ones included)

  # Completion tokens reserved for a request that sets no max_tokens, until
  # its answer's usage settles it (default 256).
  reserve_tokens = 256
}

key "batch" {
  # sha256 of "sk-example-batch" (an example: never use it)
  hash            = "sha256:aaa733abac2e6a9eaf87347fbf0683defbfaac5893e684f705d70185a4d6b920"
  max_concurrency = 4
}
