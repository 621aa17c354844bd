# llama.cpp's server with a GGUF file from the driver's model cache on one
# GPU: <model_cache>/hub/models--Qwen--Qwen2.5-0.5B-Instruct-GGUF/snapshots/*/
# qwen2.5-0.5b-instruct-q4_k_m.gguf, as `hf download` leaves it with HF_HOME =
# model_cache (or an absolute path in model, without model_file). The driver
# adds -ngl 999 (every layer on the GPU) and --metrics.
job "qwen-llamacpp" {
  group "engine" {
    network {
      port "http" {}
    }

    task "llama" {
      driver = "llmgw"

      config {
        engine  = "llamacpp"
        model   = "Qwen/Qwen2.5-0.5B-Instruct-GGUF"                # in the model cache, readable by the engine's user
        model_file = "qwen2.5-0.5b-instruct-q4_k_m.gguf"
        command = "/opt/llama.cpp/bin/llama-server" # optional: else engines.llamacpp or PATH; must be engines.llamacpp or in allowed_commands
        args    = ["-c", "8192"]
        port    = "http"
        ready {
          timeout = "5m"
        }
      }

      resources {
        cpu    = 2000
        memory = 8192

        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
