# A batch job that asks for two GPUs from nomad-device-nvml and prints what
# the task was given. `nomad alloc logs <alloc>` shows the two UUIDs.
job "gpu-env" {
  type = "batch"

  group "g" {
    task "show" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; nvidia-smi -L 2>/dev/null || true"]
      }

      resources {
        cpu    = 100
        memory = 64

        device "nvidia/gpu" {
          count = 2

          # Device attributes from the plugin can be constrained on:
          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "80 GiB"
          }
        }
      }
    }
  }
}
