# Any server: the command runs verbatim with LLMGW_HOST, LLMGW_PORT,
# LLMGW_MODEL and LLMGW_TENSOR_PARALLEL in its environment. Here the fake
# engine that ships with llmgw (bin/fake-engine), which reads them. The
# client's plugin config must allow the command:
# allowed_commands = ["/opt/llmgw/bin/fake-engine"].
job "fake" {
  group "engine" {
    network {
      port "http" {}
    }

    task "fake" {
      driver = "llmgw"

      config {
        engine  = "command"
        model   = "fake-model"
        command = "/opt/llmgw/bin/fake-engine"
        args    = ["serve", "--load-seconds", "5"]
        port    = "http"
        ready {
          path    = "/health"
          timeout = "1m"
        }
      }

      resources {
        cpu    = 200
        memory = 128

        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
