model "llama-3.1-405b" {
  profile "b200x8" {
    engine = "vllm"
    gpu    = "NVIDIA B200"
    gpus   = 8
  }
}
