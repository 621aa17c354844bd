# An autoscaled catalog: a big model that outranks a small one for watts,
# and a small one that goes to zero at night.

model "llama-3.1-70b" {
  source   = "meta-llama/Llama-3.1-70B-Instruct"
  priority = 80

  autoscale {
    min         = 1
    max         = 8
    target { outstanding_per_replica = 8 }
    up_window   = "30s"
    down_window = "10m"
    max_step    = 2
    panic_threshold = 2.0
  }

  profile "h200x4" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 4
    watts  = 2600
  }
}

model "qwen2.5-7b" {
  source = "Qwen/Qwen2.5-7B-Instruct"

  autoscale {
    min        = 0
    max        = 16
    target { kv_cache_use = 0.7 }
    idle_after = "45m"
  }

  profile "h200x1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
  }
}
