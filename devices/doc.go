// Package devices is the nomad-device-nvml device plugin: NVIDIA GPUs (and
// MIG instances) seen through NVML, offered to Nomad as devices
// nvidia/gpu/<product name>, with honest health, power and statistics.
//
// # Health
//
// A device is unhealthy while NVML fails to answer for it (the reason is
// NVML's error); while NVML shows a trace of a past fault (a pending row
// remapping or page retirement, a failed row remapping, a recovery action
// the driver asks for); and after a critical NVML event: an XID not in
// ignored_xids, or a double-bit ECC error. Events are classed (ClassifyXID):
// a transient one clears once health_recovery has passed with no new
// critical event and the device answers NVML (health_recovery = "0" keeps it
// until the plugin restarts); a fatal one (XID 79, 48, 95, 119, ...) is never
// cleared by a timer, only by a reset NVML shows (a scan finds the GPU gone
// or awaiting reset, and a later one finds it back with nothing pending) or
// by a new plugin process. Every change, either way, sends a new
// fingerprint. docs/device-plugin.md has the table.
//
// While NVML's Init fails (no library, driver not loaded yet) the plugin
// reports no devices and retries with backoff, 1s doubling to 1m.
//
// # Groups and attributes
//
// One device group per product name; a MIG instance is in the group
// "<product> MIG <profile>" and its parent GPU is not offered. Group
// attributes are memory (MiB), power_limit (W, the board's default power
// limit, not the enforced one: a power cap must change neither the
// fingerprint nor the draw placement derives from it; a GPU that reports
// no default gives its enforced limit),
// bar1 (MiB), driver_version, cuda_compute_capability, cores_clock and
// memory_clock (max MHz), pci_bandwidth (MB/s); MIG groups carry mig_slices
// and parent_power_limit instead of power_limit and bar1. When GPUs of one
// product differ, the group reports the conservative value: the least
// memory, clocks and bandwidth and the highest power limit.
//
// # Reservation
//
// Reserve binds a plain process (not only a container with NVIDIA's
// runtime) to its devices: CUDA_VISIBLE_DEVICES holds whole GPUs' CUDA
// indices in PCI bus order (with CUDA_DEVICE_ORDER=PCI_BUS_ID) or MIG
// instances' UUIDs, and NVIDIA_VISIBLE_DEVICES and LLMGW_GPU_UUIDS the
// UUIDs, as internal/nvmlseam's Binding computes them from the topology
// read at each scan. It lists /dev/nvidiaN of each GPU plus
// /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia-uvm-tools where they
// exist on the host (none in mock mode).
package devices
