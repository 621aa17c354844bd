# Hugging Face Text Generation Inference sharded over two GPUs:
# text-generation-launcher --num-shard 2.
job "mistral-tgi" {
  group "engine" {
    network {
      port "http" {}
    }

    task "tgi" {
      driver       = "llmgw"
      kill_timeout = "30s"

      config {
        engine = "tgi"
        model  = "mistralai/Mistral-7B-Instruct-v0.3"
        args   = ["--max-total-tokens", "8192"]
        port   = "http"
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
