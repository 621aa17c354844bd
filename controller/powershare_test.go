package controller

import (
	"testing"

	"github.com/llmgw/llmgw/controller/observe"
	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/facility/powercap"
)

// shareInput is two nodes of two 700 W GPUs (floor 200 W) under PDU p1:
// n1 serves "hi" (priority 80), n2 "lo" (priority 10); base 500 W a node.
func shareInput(limit, draw float64) capInput {
	p1 := facility.Domain{Level: facility.LevelPDU, Value: "p1"}
	in := capInput{domains: []powercap.Domain{{Domain: p1, LimitWatts: limit, BaseWatts: 1000, DrawWatts: 1000 + 4*draw}}}
	for i, n := range []struct {
		node, model string
		prio        int
	}{{"n1", "hi", 80}, {"n1", "hi", 80}, {"n2", "lo", 10}, {"n2", "lo", 10}} {
		id := "GPU-" + string(rune('a'+i))
		in.gpus = append(in.gpus, powercap.GPU{UUID: id, Node: n.node, Model: n.model, Priority: n.prio, Domains: []facility.Domain{p1}, DrawWatts: draw, FloorWatts: 200, MaxWatts: 700})
		in.sites = append(in.sites, gpuSite{node: n.node, model: n.model, read: observe.GPUReading{ID: id, Watts: draw, EnforcedW: 700, DefaultW: 700, MinW: 200, MaxW: 700, CapState: "default"}})
	}
	return in
}

func sharesOf(in capInput) map[string]nodeCaps {
	var none powercap.Result
	none.Caps = make([]powercap.Cap, len(in.gpus))
	return in.nodeCaps(none, none, powercap.Shares(in.domains, in.gpus, in.wants()))
}

// The node shares in the caps variables: in an oversubscribed PDU they add
// up, with the base, to at most its limit, the lower priority's node
// lowered first; a PDU with room for every GPU at its max writes no share
// (format 1).
func TestNodeSharesWritten(t *testing.T) {
	t.Parallel()
	// 2,800 W of GPUs and 1,000 W base under 3,001 W: 799 W to take.
	// Wants 345 W each (300 × 1.15): lo's two give 355 each (to 345),
	// 710; hi's the last 89, to one level rounded down to the watt (655):
	// n1 2 × 655 = 1,310, n2 690.
	want := sharesOf(shareInput(3001, 300))
	if got := want["n1"].share.Watts; got != 1310 {
		t.Errorf("n1 (hi) share %v W, want 1310", got)
	}
	if got := want["n2"].share.Watts; got != 690 {
		t.Errorf("n2 (lo) share %v W, want 690", got)
	}
	if sum := 1000 + want["n1"].share.Watts + want["n2"].share.Watts; sum > 3001 {
		t.Errorf("base + shares = %v W, over the 3,001 W limit", sum)
	}
	if g := want["n2"].share.GPUs["GPU-c"]; g != (devicesapi.ShareItems{Floor: 200, Priority: 10}) {
		t.Errorf("n2's GPU-c in the share: %+v", g)
	}
	// Room for every GPU at 700 W: no share, the variables stay format 1.
	for node, nc := range sharesOf(shareInput(3800, 300)) {
		if nc.share.Watts != 0 || len(nc.share.GPUs) != 0 {
			t.Errorf("%s: share %+v under a PDU with room for every GPU", node, nc.share)
		}
	}
}

// A share that rises by under 5 % is not rewritten (the lower one stays:
// safe); one that falls, by any amount, is.
func TestKeepShare(t *testing.T) {
	t.Parallel()
	old := sharesOf(shareInput(3001, 300))["n2"]
	for _, c := range []struct {
		watts float64
		keep  bool
	}{{old.share.Watts, true}, {old.share.Watts + 30, true}, {old.share.Watts * 1.06, false}, {old.share.Watts - 1, false}} {
		nc := old
		nc.share.Watts = c.watts
		if got := keepShare(old, nc); got != c.keep {
			t.Errorf("written %v W, new %v W: keep %v, want %v", old.share.Watts, c.watts, got, c.keep)
		}
	}
	// Other items changed: written, whatever the share.
	nc := old
	nc.caps = map[string]float64{"GPU-c": 300}
	if keepShare(old, nc) {
		t.Error("a new cap kept the old variable")
	}
}
