# catalog.hcl: the models to serve, and how.
#
# Profiles are in order of preference: a replica takes the first that fits.
# Omitted: replicas = 1, gpus = 1, nodes = 1, spread = ["rack", "pdu"],
# pool = "default", weight = 1, watts = gpus x the node's GPU power limit,
# and the layout (tensor_parallel, pipeline_parallel, data_parallel,
# expert_parallel) the engine's default for nodes x gpus (docs/driver.md).
# llmgw sets the engine's model, address, parallelism and multi-node flags
# itself: args carry the rest.

model "llama-3.1-70b" {
  source   = "meta-llama/Llama-3.1-70B-Instruct"
  replicas = 24
  # routing = "prefix" # requests sharing a prompt's first blocks go to one replica (docs/gateway.md)

  profile "h200x4" {
    engine    = "vllm"
    gpu       = "NVIDIA H200"
    gpus      = 4
    watts     = 2600 # measured under load: below 4 x 700 W
    cpu_cores = 16
    memory_gb = 256
    spread    = ["rack", "pdu"]
    args      = ["--max-model-len", "32768"]
  }

  # When no node has 4 GPUs free, take a whole node.
  profile "h200x8" {
    engine    = "vllm"
    gpu       = "NVIDIA H200"
    gpus      = 8
    cpu_cores = 32
    memory_gb = 512
    args      = ["--max-model-len", "32768"]
  }
}

model "llama-3.1-8b" {
  source   = "meta-llama/Llama-3.1-8B-Instruct"
  replicas = 32

  profile "h200x1" {
    engine    = "vllm"
    gpu       = "NVIDIA H200"
    gpus      = 1
    cpu_cores = 8
    memory_gb = 64
    weight    = 1
    args      = ["--max-model-len", "16384"]
  }
}

model "gpt-oss-120b" {
  source   = "openai/gpt-oss-120b"
  replicas = 16

  profile "h200x2" {
    engine    = "sglang"
    gpu       = "NVIDIA H200"
    gpus      = 2
    cpu_cores = 16
    memory_gb = 192
    spread    = ["row", "rack"]
    weight    = 2
  }
}

model "qwen2.5-72b" {
  source   = "Qwen/Qwen2.5-72B-Instruct"
  replicas = 12

  profile "h200x4" {
    engine    = "vllm"
    gpu       = "NVIDIA H200"
    gpus      = 4
    cpu_cores = 16
    memory_gb = 256
    weight    = 4
    env       = { VLLM_USE_V1 = "1" }
  }
}

# DeepSeek-V3 (671B, FP8) on two nodes: one shard per node, both in one rack,
# on one InfiniBand fabric. SGLang's tensor parallelism spans both nodes
# (--tp-size 16, its default for 2 x 8 GPUs), with experts over all 16.
model "deepseek-v3" {
  source   = "deepseek-ai/DeepSeek-V3"
  replicas = 12

  profile "h200x16" {
    engine      = "sglang"
    gpu         = "NVIDIA H200"
    gpus        = 8
    nodes       = 2
    watts       = 5400
    cpu_cores   = 64
    memory_gb   = 1024
    keep_within = "rack"
    spread      = ["row", "rack"]
    fabric      = "ib-ndr"
    weight      = 8
    args        = ["--trust-remote-code"]
    ready       = "/health"

    tensor_parallel = 16
    expert_parallel = 16
  }
}

# Llama 3.1 405B (BF16) on two nodes with pipeline parallelism: the two nodes
# may sit in different racks of one row.
model "llama-3.1-405b" {
  source   = "meta-llama/Llama-3.1-405B-Instruct"
  replicas = 8

  profile "h200x16" {
    engine      = "vllm"
    gpu         = "NVIDIA H200"
    gpus        = 8
    nodes       = 2
    cpu_cores   = 64
    memory_gb   = 1024
    keep_within = "row"
    spread      = ["row", "rack"]
    fabric      = "ib-ndr"
    weight      = 8

    tensor_parallel   = 8 # inside a node (vLLM's default: gpus)
    pipeline_parallel = 2 # over the nodes (vLLM's default: nodes)
  }
}
