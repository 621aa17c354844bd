# SGLang on four GPUs: python3 -m sglang.launch_server --tp-size 4.
job "llama-sglang" {
  group "engine" {
    network {
      port "http" {}
    }

    task "sglang" {
      driver       = "llmgw"
      kill_timeout = "30s"

      config {
        engine = "sglang"
        model  = "meta-llama/Llama-3.1-8B-Instruct"
        args   = ["--mem-fraction-static", "0.85"]
        port   = "http"
        ready {
          timeout = "40m"
        }
        # Gated models need HF_TOKEN: give it with a template block
        # (env = true) reading a Nomad Variable, not here in clear text.
      }

      resources {
        cpu    = 8000
        memory = 65536

        device "nvidia/gpu" {
          count = 4
        }
      }
    }
  }
}
