model "llama-3.1-70b" {
  source   = "meta-llama/Llama-3.1-70B-Instruct"
  replicas = 3
  weights {
    revision = "main"
    files    = ["*.safetensors", "config.json", "tokenizer.json"]
  }
  profile "h200x4" {
    engine    = "vllm"
    gpu       = "NVIDIA H200"
    gpus      = 4
    watts     = 2600
    cpu_cores = 16
    memory_gb = 256
  }
}

model "deepseek-v3" {
  source   = "deepseek-ai/DeepSeek-V3"
  replicas = 1
  weights {
    files = ["*.safetensors", "config.json"]
  }
  profile "h200x16" {
    engine      = "sglang"
    gpu         = "NVIDIA H200"
    gpus        = 8
    nodes       = 2
    keep_within = "rack"
    fabric      = "ib"
    cpu_cores   = 64
    memory_gb   = 512
  }
}
