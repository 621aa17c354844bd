package observe

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Labels are the node labels the controller's API writes as Nomad dynamic
// node metadata (PUT /v1/nodes/{node}/labels, llmgw ctl label), by name,
// with the meta key of each.
var Labels = map[string]string{
	"site": MetaSite, "room": MetaRoom, "row": MetaRow, "rack": MetaRack, "pdu": MetaPDU,
	"fabric": MetaFabric, "hcas": MetaHCAs, "base_watts": MetaBaseWatts,
}

// LabelNames are Labels' names: the levels from the top, then fabric,
// hcas and base_watts.
func LabelNames() []string {
	return []string{"site", "room", "row", "rack", "pdu", "fabric", "hcas", "base_watts"}
}

// Limits of the label values CheckLabel accepts.
const (
	// MaxLabelLen is the longest name a location or fabric label takes:
	// a DNS label's length.
	MaxLabelLen = 63
	// MaxBaseWatts is the most llmgw.base_watts says a node draws without
	// GPU work: 100 kW, far above any server's (an H200 server idles at
	// about 1.2 kW) and still below any budget that would hold it.
	MaxBaseWatts = 100_000
	// MaxHCAsLen is the longest llmgw.hcas: the node's HCAs as NCCL's
	// NCCL_IB_HCA takes them (the engine's environment on a multi-node
	// replica), a list of 16 names with ports fits in it.
	MaxHCAsLen = 256
)

// CheckLabel checks the value of the label name (one of Labels) as the
// API writes it: a name (the location levels and fabric) is 1 to 63
// letters, digits, '-', '_' or '.', as in a domain name, so that no
// newline, escape, NUL, space, '=' or ',' reaches Nomad's node meta, and
// every such value is one facility.ParseDomain takes; base_watts is a
// number of watts from 0 to MaxBaseWatts, as Fleet reads it (ParseBaseWatts);
// hcas is a list of HCAs as NCCL_IB_HCA takes it (checkHCAs). The error
// names the label.
func CheckLabel(name, value string) error {
	switch name {
	case "base_watts":
		if _, err := ParseBaseWatts(value); err != nil {
			return fmt.Errorf("label base_watts: %w", err)
		}
		return nil
	case "hcas":
		return checkHCAs(value)
	}
	if _, ok := Labels[name]; !ok {
		return fmt.Errorf("unknown label %q", clip(name))
	}
	if value == "" {
		return fmt.Errorf("label %s: empty value (to remove the label, unset it)", name)
	}
	if len(value) > MaxLabelLen {
		return fmt.Errorf("label %s: value %q is %d bytes long, more than %d", name, clip(value), len(value), MaxLabelLen)
	}
	for i := 0; i < len(value); i++ {
		if !nameByte(value[i]) {
			return fmt.Errorf("label %s: value %q has %q at byte %d: only letters, digits, '-', '_' and '.' (as in a domain name)",
				name, clip(value), value[i], i)
		}
	}
	return nil
}

// checkHCAs checks llmgw.hcas, which multi-node replicas get as
// NCCL_IB_HCA: an optional '^' (exclude) and '=' (exact names), then a
// comma-separated list of HCA names, each with an optional ":port"
// ("mlx5_0:1,mlx5_1:1"), at most MaxHCAsLen bytes.
func checkHCAs(value string) error {
	list := strings.TrimPrefix(strings.TrimPrefix(value, "^"), "=")
	bad := list == "" || len(value) > MaxHCAsLen
	for item := range strings.SplitSeq(list, ",") {
		name, port, hasPort := strings.Cut(item, ":")
		bad = bad || name == "" || (hasPort && port == "")
		for i := 0; i < len(name); i++ {
			bad = bad || !nameByte(name[i])
		}
		for i := 0; i < len(port); i++ {
			bad = bad || port[i] < '0' || port[i] > '9'
		}
	}
	if bad {
		return fmt.Errorf("label hcas: %q is not a list of HCAs as NCCL_IB_HCA takes it (e.g. mlx5_0:1,mlx5_1:1, "+
			"optionally after '^' or '='; names of letters, digits, '-', '_' or '.'; at most %d bytes)", clip(value), MaxHCAsLen)
	}
	return nil
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// ParseBaseWatts reads llmgw.base_watts: a finite number of watts from 0
// to MaxBaseWatts.
func ParseBaseWatts(s string) (float64, error) {
	w, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(w) || math.IsInf(w, 0) || w < 0 || w > MaxBaseWatts {
		return 0, fmt.Errorf("%q is not a number of watts from 0 to %d", clip(s), MaxBaseWatts)
	}
	return w, nil
}

// clip shortens a value quoted in an error.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
