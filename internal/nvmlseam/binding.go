package nvmlseam

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The environment that binds a process to its devices. The device plugin's
// Reserve and the driver both write it from a Binding, so a plain process
// (raw_exec, exec) and an llmgw engine see the same thing.
const (
	// EnvCUDAVisible is CUDA's device filter: integer indices for whole
	// GPUs, or UUIDs (the only form CUDA takes for a MIG instance).
	EnvCUDAVisible = "CUDA_VISIBLE_DEVICES"
	// EnvCUDAOrder makes CUDA number GPUs by PCI bus id, as Topology
	// does, instead of fastest first.
	EnvCUDAOrder = "CUDA_DEVICE_ORDER"
	// EnvNVIDIAVisible is the NVIDIA container runtime's variable; it
	// carries the UUIDs, as Nomad's own NVIDIA plugin sets it.
	EnvNVIDIAVisible = "NVIDIA_VISIBLE_DEVICES"
	// EnvUUIDs is llmgw's own: the allocated UUIDs, in the order of
	// CUDA_VISIBLE_DEVICES.
	EnvUUIDs = "LLMGW_GPU_UUIDS"
	// EnvGroup names the device group the devices were allocated from,
	// "nvidia/gpu/<name>", as a job's device block names it.
	EnvGroup = "LLMGW_GPU_GROUP"
)

// PCIBusOrder is CUDA_DEVICE_ORDER's value.
const PCIBusOrder = "PCI_BUS_ID"

// IsMIG reports whether a device UUID names a MIG instance.
func IsMIG(uuid string) bool { return strings.HasPrefix(uuid, "MIG-") }

// Board is one physical GPU as NVML lists it.
type Board struct {
	UUID  string // GPU-…
	BusID string // PCI bus id, "" when NVML could not say
	MIG   bool   // MIG mode is on: CUDA sees its instances, not the board
	// Index is NVML's index of the board. Some engines (vLLM) take a
	// CUDA_VISIBLE_DEVICES integer as an NVML index for their own NVML
	// queries, so IndexMismatch reports where it differs from CUDA's.
	Index int
}

// Topology is a host's GPUs in the order CUDA numbers them under
// CUDA_DEVICE_ORDER=PCI_BUS_ID: ascending PCI bus id. (NVML's own index
// follows the same order on the hosts we know of, but NVML does not promise
// it; the bus ids are what CUDA sorts by.)
type Topology struct {
	boards []Board
	// byUUID is the CUDA index of each whole GPU's UUID.
	byUUID map[string]int
	// unordered says why the integer numbering is not known ("" when it
	// is): a GPU NVML could not describe, or a GPU in MIG mode.
	unordered string
}

// NewTopology orders boards as CUDA does.
func NewTopology(boards []Board) Topology {
	t := Topology{boards: append([]Board(nil), boards...), byUUID: map[string]int{}}
	sort.SliceStable(t.boards, func(i, j int) bool { return busLess(t.boards[i].BusID, t.boards[j].BusID) })
	for i, b := range t.boards {
		t.byUUID[b.UUID] = i
		switch {
		case t.unordered != "":
		case b.BusID == "":
			t.unordered = fmt.Sprintf("NVML gave no PCI bus id for %s", b.UUID)
		case b.MIG:
			// CUDA's integer numbering of a host that mixes MIG instances
			// and whole GPUs is not one NVML lets us derive for certain,
			// and a wrong index would put two tasks on one GPU.
			t.unordered = fmt.Sprintf("%s is in MIG mode, and CUDA's integer numbering of a host mixing MIG and whole GPUs is not derived here", b.UUID)
		}
	}
	return t
}

// Unordered is why whole GPUs must be named by UUID on this host, or "".
func (t Topology) Unordered() string { return t.unordered }

// IndexMismatch names the first GPU whose NVML index is not its CUDA index
// (its place in PCI bus order), or "" when they agree throughout.
func (t Topology) IndexMismatch() string {
	for i, b := range t.boards {
		if b.Index != i {
			return fmt.Sprintf("%s (PCI %s) is NVML device %d but CUDA device %d under CUDA_DEVICE_ORDER=PCI_BUS_ID", b.UUID, b.BusID, b.Index, i)
		}
	}
	return ""
}

// Boards returns the GPUs in CUDA's order.
func (t Topology) Boards() []Board { return append([]Board(nil), t.boards...) }

// ReadTopology asks NVML for every GPU's UUID, PCI bus id and MIG mode. A
// GPU NVML cannot describe leaves the topology unordered (its reason
// names the GPU): CUDA may not count it either, so indices past it would
// be wrong.
func ReadTopology(lib Lib) (Topology, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return Topology{}, fmt.Errorf("NVML device count: %s", Explain(ret))
	}
	var boards []Board
	why := ""
	fail := func(format string, args ...any) {
		if why == "" {
			why = fmt.Sprintf(format, args...)
		}
	}
	for i := 0; i < n; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			fail("NVML device %d: %s", i, Explain(ret))
			continue
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			fail("NVML device %d UUID: %s", i, Explain(ret))
			continue
		}
		b := Board{UUID: uuid, Index: i}
		if pci, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
			b.BusID = BusID(pci)
		} else {
			fail("NVML %s PCI info: %s", uuid, Explain(ret))
		}
		if cur, _, ret := dev.GetMigMode(); ret == nvml.SUCCESS && cur == nvml.DEVICE_MIG_ENABLE {
			b.MIG = true
		}
		boards = append(boards, b)
	}
	t := NewTopology(boards)
	if why != "" {
		t.unordered = why
	}
	return t, nil
}

// Binding is how a task's devices are handed to CUDA.
type Binding struct {
	// UUIDs are the devices (GPU-… and MIG-…), whole GPUs first in CUDA's
	// order, then MIG instances in the order given.
	UUIDs []string
	// Visible are CUDA_VISIBLE_DEVICES's entries: CUDA indices for whole
	// GPUs, or the UUIDs (see ByUUID).
	Visible []string
	// MIG counts the MIG instances in UUIDs.
	MIG int
	// ByUUID is why Visible holds UUIDs rather than indices, "" when it
	// holds indices or nothing.
	ByUUID string
}

// Bind works out the binding of uuids on this host. A whole GPU the
// topology does not list is an error naming it.
func (t Topology) Bind(uuids []string) (Binding, error) {
	var whole, mig []string
	seen := map[string]bool{}
	var unknown []string
	for _, u := range uuids {
		if seen[u] {
			continue
		}
		seen[u] = true
		switch _, ok := t.byUUID[u]; {
		case IsMIG(u):
			mig = append(mig, u)
		case ok:
			whole = append(whole, u)
		default:
			unknown = append(unknown, u)
		}
	}
	if len(unknown) > 0 {
		have := make([]string, 0, len(t.boards))
		for _, b := range t.boards {
			have = append(have, b.UUID)
		}
		return Binding{}, fmt.Errorf("%s not among this host's GPUs (NVML lists %s)", strings.Join(unknown, ", "), orNone(have))
	}
	sort.SliceStable(whole, func(i, j int) bool { return t.byUUID[whole[i]] < t.byUUID[whole[j]] })
	b := Binding{UUIDs: append(whole, mig...), MIG: len(mig)}
	switch {
	case len(b.UUIDs) == 0:
	case len(mig) > 0:
		b.Visible, b.ByUUID = b.UUIDs, "CUDA names a MIG instance only by its UUID"
	case t.unordered != "":
		b.Visible, b.ByUUID = b.UUIDs, t.unordered
	default:
		for _, u := range whole {
			b.Visible = append(b.Visible, strconv.Itoa(t.byUUID[u]))
		}
	}
	return b, nil
}

// UUIDBinding names every device by UUID, for why: the binding to use when
// the host's numbering is not known at all.
func UUIDBinding(uuids []string, why string) Binding {
	b := Binding{UUIDs: append([]string(nil), uuids...), Visible: append([]string(nil), uuids...), ByUUID: why}
	for _, u := range uuids {
		if IsMIG(u) {
			b.MIG++
		}
	}
	if len(uuids) == 0 {
		b.ByUUID = ""
	}
	return b
}

// Env is the binding's environment. With no device it hides every GPU:
// CUDA_VISIBLE_DEVICES is empty and NVIDIA_VISIBLE_DEVICES is "void".
func (b Binding) Env() map[string]string {
	nv := strings.Join(b.UUIDs, ",")
	if nv == "" {
		nv = "void"
	}
	return map[string]string{
		EnvCUDAVisible:   strings.Join(b.Visible, ","),
		EnvCUDAOrder:     PCIBusOrder,
		EnvNVIDIAVisible: nv,
		EnvUUIDs:         strings.Join(b.UUIDs, ","),
	}
}

// SplitList splits a device list variable's value into its entries,
// dropping empty ones and the container runtime's words that name no
// specific device ("all", "none", "void").
func SplitList(v string) []string {
	switch strings.TrimSpace(v) {
	case "all", "none", "void":
		return nil
	}
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// busLess orders PCI bus ids ("domain:bus:device.function", hex) by value,
// so that "0000:9a:00.0" and "00000000:9A:00.0" compare alike; an empty id
// sorts last.
func busLess(a, b string) bool {
	ka, okA := busKey(a)
	kb, okB := busKey(b)
	switch {
	case okA && okB:
		return ka < kb
	case okA != okB:
		return okA
	default:
		return strings.ToLower(a) < strings.ToLower(b)
	}
}

func busKey(id string) (uint64, bool) {
	f := strings.FieldsFunc(id, func(r rune) bool { return r == ':' || r == '.' })
	if len(f) != 4 {
		return 0, false
	}
	var k uint64
	for i, bits := range []uint{32, 8, 5, 3} {
		v, err := strconv.ParseUint(f[i], 16, 64)
		if err != nil || v >= 1<<bits {
			return 0, false
		}
		k = k<<bits | v
	}
	return k, true
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
