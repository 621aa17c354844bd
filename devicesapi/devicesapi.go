// Package devicesapi holds the names nomad-device-nvml and the controller
// share, each defined once: the device stats the controller reads through
// Nomad's client stats (a GPU's draw and power limits, its cap state), and
// the Nomad variables through which the controller caps GPUs and the
// plugin applies the caps (docs/device-plugin.md, "Power caps"); and the
// rule by which a node holds the power share those variables give it
// (ShareHolder: the plugin runs it, the power simulation replays it).
package devicesapi

import (
	"fmt"
	"strings"
)

// Device stats of a GPU (nomad-device-nvml's Stats; Nomad's client stats).
const (
	StatPowerDraw     = "power_draw"           // W; the enforced limit as denominator
	StatParent        = "parent"               // a MIG instance's parent GPU UUID
	StatEnforcedLimit = "enforced_power_limit" // W
	StatDefaultLimit  = "default_power_limit"  // W
	StatMinLimit      = "min_power_limit"      // W: the least the GPU accepts
	StatMaxLimit      = "max_power_limit"      // W: the most the GPU accepts
	StatPowerCap      = "power_cap"            // who set the enforced limit: "default", "capped 450 W by controller", …
)

// The power-caps variables: the controller writes
// <PowerCapsPrefix>/<node name> with CapItem+<GPU UUID> and
// FallbackItem+<GPU UUID> items (watts) and always ManagedItem, and renews
// <PowerCapsPrefix>/<Heartbeat>, whose LeaseItem may set the lease.
const (
	PowerCapsPrefix = "llmgw/power-caps"
	Heartbeat       = "_heartbeat"
	CapItem         = "cap."      // cap.<GPU UUID> = watts: the controller's cap
	FallbackItem    = "fallback." // fallback.<GPU UUID> = watts: the cap if the controller is lost
	LeaseItem       = "lease"     // in the heartbeat: a duration overriding the plugin's lease
	// ManagedItem is in every node's caps variable, so that the variable of
	// a node whose GPUs need neither a cap nor a fallback still has an
	// item: Nomad refuses a variable without items ("variable missing
	// required Items object"), and the variable's existence is what tells
	// the plugin the controller manages the node. The plugin ignores it.
	ManagedItem = "managed"
)

// NodeCapsPath is the variable holding the caps of the node named node,
// under prefix. Nomad variable paths allow only letters, digits and -_~/,
// so every other byte of the name (the dots of "gpu-1.dc1") is written
// ~XX in hex, as EscapePath does.
func NodeCapsPath(prefix, node string) string { return prefix + "/" + EscapePath(node) }

// EscapePath writes s as one segment of a Nomad variable path: letters,
// digits, - and _ as they are, every other byte ~XX in hex. The
// controller's other per-name variables (a replica's decision) use it too.
func EscapePath(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "~%02x", c)
		}
	}
	return b.String()
}
