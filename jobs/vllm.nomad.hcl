# vLLM serving a model on two GPUs of one node, tensor-parallel.
# `nomad alloc status` shows the driver's events: the command line and the
# GPUs, shard loading progress, "Ready after …".
job "qwen-vllm" {
  group "engine" {
    network {
      port "http" {}
    }

    service {
      name     = "llmgw-qwen"
      provider = "nomad"
      port     = "http"
      tags     = ["llmgw", "model=qwen", "profile=vllm-tp2"]
      check {
        type     = "http"
        path     = "/health"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "vllm" {
      driver       = "llmgw"
      kill_timeout = "30s"

      config {
        engine = "vllm"
        model  = "Qwen/Qwen2.5-0.5B-Instruct"
        args   = ["--max-model-len", "4096"]
        port   = "http"
        served_model_name = "qwen" # --served-model-name
        ready {
          path     = "/health"
          interval = "1s"
          timeout  = "30m"
        }
        tensor_parallel = 0 # one per allocated GPU
        env = {
          VLLM_LOGGING_LEVEL = "INFO"
        }
      }

      resources {
        cpu    = 4000
        memory = 32768

        device "nvidia/gpu" {
          count = 2
        }
      }
    }
  }
}
