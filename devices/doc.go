// Package devices is the nomad-device-nvml device plugin: NVIDIA GPUs (and
// MIG instances) seen through NVML, offered to Nomad as devices
// nvidia/gpu/<product name>, with honest health, power and statistics.
//
// # Health
//
// A device is unhealthy while NVML fails to answer for it (the reason is
// NVML's error), and after a critical NVML event: an XID not in
// ignored_xids, or a double-bit ECC error. An event-marked device becomes
// healthy again once health_recovery has passed with no new critical event
// and it answers NVML (health_recovery = "0" keeps it unhealthy until the
// plugin restarts). Every change, either way, sends a new fingerprint.
//
// # Groups and attributes
//
// One device group per product name; a MIG instance is in the group
// "<product> MIG <profile>" and its parent GPU is not offered. Group
// attributes are memory (MiB), power_limit (W, the enforced board limit),
// bar1 (MiB), driver_version, cuda_compute_capability, cores_clock and
// memory_clock (max MHz), pci_bandwidth (MB/s); MIG groups carry mig_slices
// and parent_power_limit instead of power_limit and bar1. When GPUs of one
// product differ, the group reports the conservative value: the least
// memory, clocks and bandwidth and the highest power limit.
//
// # Reservation
//
// Reserve sets CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES to the
// reserved UUIDs in NVML index order, so a plain process (not only a
// container with NVIDIA's runtime) is bound to its GPUs, and lists
// /dev/nvidiaN of each GPU plus /dev/nvidiactl, /dev/nvidia-uvm and
// /dev/nvidia-uvm-tools where they exist on the host (none in mock mode).
package devices
