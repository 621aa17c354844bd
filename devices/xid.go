package devices

import "fmt"

// xidText gives the meaning of the XIDs operators meet most; the full list
// is in NVIDIA's XID catalogue.
var xidText = map[uint64]string{
	13:  "graphics engine exception",
	31:  "GPU memory page fault",
	32:  "invalid or corrupted push buffer stream",
	38:  "driver firmware error",
	43:  "GPU stopped processing",
	45:  "preemptive cleanup, due to previous errors",
	48:  "double-bit ECC error",
	61:  "internal micro-controller breakpoint/warning",
	62:  "internal micro-controller halt",
	63:  "ECC page retirement or row remapping recorded",
	64:  "ECC page retirement or row remapping failed",
	68:  "video processor exception",
	69:  "graphics engine class error",
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error",
	95:  "uncontained ECC error",
	109: "context switch timeout",
	119: "GSP RPC timeout",
	120: "GSP error",
	121: "C2C link error",
	140: "unrecovered ECC error",
	143: "GPU initialization failure",
	154: "GPU recovery action changed",
}

// XIDReason is the health description for an XID, e.g.
// "XID 79: GPU has fallen off the bus".
func XIDReason(xid uint64) string {
	if t, ok := xidText[xid]; ok {
		return fmt.Sprintf("XID %d: %s", xid, t)
	}
	return fmt.Sprintf("XID %d", xid)
}
