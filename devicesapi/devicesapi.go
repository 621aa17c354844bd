// Package devicesapi holds the names nomad-device-nvml and the controller
// share, each defined once: the device stats the controller reads through
// Nomad's client stats (a GPU's draw and power limits, its cap state), and
// the Nomad variables through which the controller caps GPUs and the
// plugin applies the caps (docs/device-plugin.md, "Power caps").
package devicesapi

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
// FallbackItem+<GPU UUID> items (watts), and renews
// <PowerCapsPrefix>/<Heartbeat>, whose LeaseItem may set the lease.
const (
	PowerCapsPrefix = "llmgw/power-caps"
	Heartbeat       = "_heartbeat"
	CapItem         = "cap."      // cap.<GPU UUID> = watts: the controller's cap
	FallbackItem    = "fallback." // fallback.<GPU UUID> = watts: the cap if the controller is lost
	LeaseItem       = "lease"     // in the heartbeat: a duration overriding the plugin's lease
)
