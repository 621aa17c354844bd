model "llama-3.1-70b" {
  source   = "meta-llama/Llama-3.1-70B-Instruct"
  replicas = 12
  profile "h200x8" {
    engine    = "vllm"
    gpu       = "NVIDIA H200"
    gpus      = 8
  }
  profile "h200x4" {
    engine    = "vllm"
    gpu       = "NVIDIA H200"
    gpus      = 4
  }
}
