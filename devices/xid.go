package devices

import "fmt"

// XIDClass is what an XID says about the GPU, and so what ends the
// unhealthy state it causes. The classes follow the immediate action that
// NVIDIA's XID catalogue gives for each XID (docs/device-plugin.md has the
// table and the sources).
type XIDClass int

const (
	// XIDTransient: the GPU reported a fault it contains or survives (a
	// contained ECC error, a corrected link error, an XID this plugin does
	// not know). The device is unhealthy until health_recovery passes with
	// no new event and it answers NVML.
	XIDTransient XIDClass = iota
	// XIDApplication: an application's own fault (bad memory access,
	// exceptions in its kernels, its context torn down). The GPU is fine;
	// these are in the default ignored_xids. Taken out of ignored_xids, one
	// is treated as transient.
	XIDApplication
	// XIDFatal: the GPU needs a reset (or the node a reboot) before it can
	// be trusted again. No timer clears it; see Manager for what does.
	XIDFatal
)

func (c XIDClass) String() string {
	switch c {
	case XIDApplication:
		return "application"
	case XIDFatal:
		return "fatal"
	default:
		return "transient"
	}
}

type xidInfo struct {
	text  string
	class XIDClass
}

// xids gives the meaning and class of the XIDs operators meet most on data
// centre GPUs; the full list is in NVIDIA's XID catalogue. An XID missing
// here is transient.
var xids = map[uint64]xidInfo{
	13:  {"graphics engine exception", XIDApplication},
	31:  {"GPU memory page fault", XIDApplication},
	32:  {"invalid or corrupted push buffer stream", XIDTransient},
	38:  {"driver firmware error", XIDFatal},
	43:  {"GPU stopped processing", XIDApplication},
	45:  {"preemptive cleanup, due to previous errors", XIDApplication},
	46:  {"GPU stopped processing (driver timeout)", XIDFatal},
	48:  {"double-bit ECC error", XIDFatal},
	61:  {"internal micro-controller breakpoint/warning", XIDTransient},
	62:  {"internal micro-controller halt", XIDFatal},
	63:  {"ECC page retirement or row remapping recorded", XIDFatal},
	64:  {"ECC page retirement or row remapping failed", XIDFatal},
	68:  {"video processor exception", XIDApplication},
	69:  {"graphics engine class error", XIDTransient},
	74:  {"NVLink error", XIDFatal},
	79:  {"GPU has fallen off the bus", XIDFatal},
	92:  {"high single-bit ECC error rate", XIDTransient},
	94:  {"contained ECC error", XIDTransient},
	95:  {"uncontained ECC error", XIDFatal},
	109: {"context switch timeout", XIDApplication},
	119: {"GSP RPC timeout", XIDFatal},
	120: {"GSP error", XIDFatal},
	121: {"C2C link corrected error", XIDTransient},
	140: {"unrecovered ECC error", XIDFatal},
	143: {"GPU initialization failure", XIDFatal},
	154: {"GPU recovery action changed", XIDFatal},
}

// ClassifyXID returns an XID's class; unknown XIDs are transient.
func ClassifyXID(xid uint64) XIDClass {
	if i, ok := xids[xid]; ok {
		return i.class
	}
	return XIDTransient
}

// XIDReason is the health description for an XID, e.g.
// "XID 79: GPU has fallen off the bus".
func XIDReason(xid uint64) string {
	if i, ok := xids[xid]; ok {
		return fmt.Sprintf("XID %d: %s", xid, i.text)
	}
	return fmt.Sprintf("XID %d", xid)
}
