# llama.cpp's server with a local GGUF file on one GPU.
job "qwen-llamacpp" {
  group "engine" {
    network {
      port "http" {}
    }

    task "llama" {
      driver = "llmgw"

      config {
        engine  = "llamacpp"
        model   = "/var/lib/llmgw/models/qwen2.5-0.5b-instruct-q4_k_m.gguf" # readable by the engine's user
        command = "/opt/llama.cpp/bin/llama-server" # optional: else engines.llamacpp or PATH; must be engines.llamacpp or in allowed_commands
        args    = ["-c", "8192", "--n-gpu-layers", "99"]
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
