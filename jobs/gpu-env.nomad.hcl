# A batch job that asks for two GPUs from nomad-device-nvml and prints what
# the task was given. `nomad alloc logs <alloc>` shows CUDA_VISIBLE_DEVICES
# (the GPUs' CUDA indices in PCI bus order, with CUDA_DEVICE_ORDER=PCI_BUS_ID)
# and their UUIDs. nvidia-smi reads NVML, which ignores CUDA_VISIBLE_DEVICES:
# it lists every GPU of the host, to match the indices with.
job "gpu-env" {
  type = "batch"

  group "g" {
    task "show" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER=$CUDA_DEVICE_ORDER LLMGW_GPU_UUIDS=$LLMGW_GPU_UUIDS; nvidia-smi -L 2>/dev/null || true"]
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
