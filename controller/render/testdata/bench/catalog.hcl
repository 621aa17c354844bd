# Every profile shape the catalog allows, one model each: what
# BenchmarkParseValidateRender parses, validates and renders. The layout
# is stated with tensor_parallel & co. (before they existed, the same
# shapes stated it in args: see docs/perf.md).
model "vllm-1" {
  source = "Qwen/Qwen2.5-0.5B-Instruct"
  profile "p" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    args   = ["--max-model-len", "4096"]
  }
}
model "vllm-tp4" {
  source = "Qwen/Qwen2.5-72B-Instruct"
  profile "p" {
    engine    = "vllm"
    gpu       = "NVIDIA H200"
    gpus      = 4
    cpu_cores = 16
    memory_gb = 256
    tensor_parallel = 4
    args      = ["--max-model-len", "32768"]
    env       = { VLLM_USE_V1 = "1" }
  }
}
model "vllm-pp2x8" {
  source = "meta-llama/Llama-3.1-405B-Instruct"
  profile "p" {
    engine      = "vllm"
    gpu         = "NVIDIA H200"
    gpus        = 8
    nodes       = 2
    keep_within = "rack"
    fabric      = "ib-ndr"
    tensor_parallel   = 8
    pipeline_parallel = 2
  }
}
model "vllm-tp8pp4" {
  source = "meta-llama/Llama-3.1-405B-Instruct"
  profile "p" {
    engine      = "vllm"
    gpu         = "NVIDIA H200"
    gpus        = 8
    nodes       = 4
    keep_within = "row"
    tensor_parallel   = 8
    pipeline_parallel = 4
  }
}
model "sglang-2" {
  source = "openai/gpt-oss-120b"
  profile "p" {
    engine = "sglang"
    gpu    = "NVIDIA H200"
    gpus   = 2
    tensor_parallel = 2
  }
}
model "sglang-tp16" {
  source = "deepseek-ai/DeepSeek-V3"
  profile "p" {
    engine      = "sglang"
    gpu         = "NVIDIA H200"
    gpus        = 8
    nodes       = 2
    keep_within = "rack"
    fabric      = "ib-ndr"
    tensor_parallel = 16
    args        = ["--trust-remote-code"]
  }
}
model "tgi-4" {
  source = "mistralai/Mistral-7B-Instruct-v0.3"
  profile "p" {
    engine = "tgi"
    gpu    = "NVIDIA L40S"
    gpus   = 4
    args   = ["--max-total-tokens", "8192"]
  }
}
model "llamacpp-1" {
  source = "/models/qwen2.5-0.5b-instruct-q4_k_m.gguf"
  profile "p" {
    engine = "llamacpp"
    gpu    = "NVIDIA L4"
    pool   = "edge"
    args   = ["--ctx-size", "8192"]
  }
}
model "command-1" {
  source = "my-model"
  profile "p" {
    engine = "command"
    gpu    = "NVIDIA H200"
    gpus   = 2
    ready  = "/ready"
    args   = ["--listen", "x"]
  }
}
model "command-2nodes" {
  source = "my-model"
  profile "p" {
    engine      = "command"
    gpu         = "NVIDIA H200"
    gpus        = 4
    nodes       = 2
    keep_within = "rack"
  }
}
