# The catalog `make demo` runs: small models on the demo's mock H200s, served
# by fake-engine (an OpenAI-compatible stand-in) through the llmgw driver, in
# strict mode for vLLM: args must be what vLLM's parser takes, and
# fake-engine's own flags go in FAKE_ENGINE_FLAGS.

model "qwen2.5-0.5b" {
  source   = "Qwen/Qwen2.5-0.5B-Instruct"
  replicas = 3

  profile "h200x1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    spread = ["rack", "pdu"]
    args   = ["--max-model-len", "4096"]
    env    = { FAKE_ENGINE_FLAGS = "--load-seconds 3" }
  }
}

model "llama-3.1-8b" {
  source   = "meta-llama/Llama-3.1-8B-Instruct"
  replicas = 2

  profile "h200x2" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 2
    watts  = 1100
    spread = ["rack", "pdu"]
    args   = ["--max-model-len", "8192"]
    env    = { FAKE_ENGINE_FLAGS = "--load-seconds 5" }
  }
}
