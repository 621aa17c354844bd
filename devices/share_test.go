package devices

import (
	"fmt"
	"testing"
	"time"
)

// setDraw makes mock GPU i want w watts (it draws min(w, its limit)).
func (r *capsRig) setDraw(i int, w float64) {
	r.m.GPUs()[i].Update(func(g *MockGPU) { g.PowerMW = uint32(w * 1000) })
}

// enforcedSum is Σ the GPUs' enforced limits, in W.
func (r *capsRig) enforcedSum() float64 {
	s := 0.0
	for i := range r.m.GPUs() {
		s += float64(r.limitMW(i)) / 1000
	}
	return s
}

// shareVar writes a format-2 variable: share watts, GPU 0 at priority 80
// and the others at 10, every floor 250 W, plus the extra items.
func (r *capsRig) shareVar(share string, extra ...string) {
	kv := []string{"managed", "true", "format", "2", "share", share}
	for i := range r.m.GPUs() {
		prio := "10"
		if i == 0 {
			prio = "80"
		}
		kv = append(kv, "priority."+r.uuid(i), prio, "floor."+r.uuid(i), "250")
	}
	r.put(append(kv, extra...)...)
}

// The node holds its share itself: over it, the GPUs are capped at once
// (the lowest priority first, the caps summing to at most the share);
// under the lift line for share_hold, the caps lift.
func TestNodeHoldsItsShare(t *testing.T) {
	r := newCapsRig(t, MockConfig{System: "dgxh200", GPUs: ptr(4), PowerWatts: ptr(300.0)}, PowerCaps{ShareInterval: 100 * time.Millisecond, ShareHold: time.Second})
	r.waitFingerprint()
	r.shareVar("1600")
	// 4 × 300 = 1,200 W of a 1,600 W share (75 %): nothing to hold. The
	// node has read the variable once a GPU is llmgw's (its stat says
	// "default"), and the holder has run once the stat has been read a few
	// intervals on.
	r.waitFor("the variable read", func() bool { return r.capStat(0) == "default" })
	// Over the share: GPU 0 (priority 80) wants 700, the others 500 each
	// (2,200 W). The others come down, to 300 W each: 700 + 3 × 300 =
	// 1,600 W, GPU 0 left at its default.
	r.setDraw(0, 700)
	for i := 1; i < 4; i++ {
		r.setDraw(i, 500)
	}
	r.waitFor("the share held", func() bool {
		return r.limitMW(0) == 700000 && r.limitMW(1) == 300000 && r.limitMW(2) == 300000 && r.limitMW(3) == 300000
	})
	if got := r.capStat(1); got != "capped 300 W by node share 1600 W" {
		t.Errorf("GPU 1 power_cap %q", got)
	}
	if got := r.capStat(0); got != "default" {
		t.Errorf("GPU 0 (priority 80) power_cap %q, want default", got)
	}
	if s := r.enforcedSum(); s > 1600 {
		t.Errorf("caps sum to %v W, over the 1,600 W share", s)
	}
	// A lower share from the controller: down at once, the low priority to
	// its 250 W floor first, then GPU 0: 1,200 − 3 × 250 = 450 W.
	r.shareVar("1200")
	r.waitFor("the lower share held", func() bool {
		return r.limitMW(0) == 450000 && r.limitMW(1) == 250000 && r.limitMW(2) == 250000 && r.limitMW(3) == 250000
	})
	// The draw falls to 100 W a GPU (400 W of 1,200): after share_hold
	// (1 s) under 85 % the caps lift.
	for i := range 4 {
		r.setDraw(i, 100)
	}
	r.waitFor("the share caps lifted", func() bool {
		for i := range 4 {
			if r.limitMW(i) != 700000 || r.capStat(i) != "default" {
				return false
			}
		}
		return true
	})
}

// The controller's cap stays when it is lower than the node's, and a
// share with room for every GPU at its max caps nothing.
func TestNodeShareUnderTheControllersCaps(t *testing.T) {
	r := newCapsRig(t, MockConfig{System: "dgxh200", GPUs: ptr(2), PowerWatts: ptr(600.0)}, PowerCaps{ShareInterval: 100 * time.Millisecond, ShareHold: time.Second})
	r.waitFingerprint()
	// GPU 0 capped by the controller at 400 W, the share 1,000 W: the
	// split counts GPU 0 at 400 W at most (its max is the controller's
	// cap), so GPU 1 may have the other 600 W once the node draws 95 % of
	// its share.
	r.put("managed", "true", "cap."+r.uuid(0), "400", "format", "2", "share", "1000",
		"priority."+r.uuid(0), "80", "priority."+r.uuid(1), "10")
	r.waitFor("the controller's cap", func() bool { return r.capStat(0) == "capped 400 W by controller" })
	r.setDraw(1, 700)
	// 400 + 700 = 1,100 W > 950: GPU 1 (priority 10) down to 600 W.
	r.waitFor("GPU 1 held to the share", func() bool { return r.limitMW(1) == 600000 && r.limitMW(0) == 400000 })
	if got := r.capStat(0); got != "capped 400 W by controller" {
		t.Errorf("GPU 0 power_cap %q", got)
	}
	// A share of both maxima (400 + 700): nothing for the node to hold.
	r.put("managed", "true", "cap."+r.uuid(0), "400", "format", "2", "share", "1100")
	r.waitFor("GPU 1 back at its default", func() bool { return r.limitMW(1) == 700000 && r.capStat(1) == "default" })
}

// Lease loss: the fallbacks, not the node's share caps; a share the
// plugin cannot read: the fallbacks too, saying why.
func TestNodeShareLeaseLossAndUnreadableShare(t *testing.T) {
	r := newCapsRig(t, MockConfig{System: "dgxh200", GPUs: ptr(2), PowerWatts: ptr(650.0)}, PowerCaps{Lease: time.Second, ShareInterval: 100 * time.Millisecond, ShareHold: time.Second})
	r.waitFingerprint()
	r.beat("1h")
	r.shareVar("1000", "fallback."+r.uuid(0), "450", "fallback."+r.uuid(1), "300")
	// 1,300 W of a 1,000 W share: GPU 1 (priority 10) to 1,000 − 650 ×
	// 1.15 capped at 700 → 300 W, GPU 0 at 700 W: 1,000 W.
	r.waitFor("the share held", func() bool { return r.limitMW(1) == 300000 })
	// A share in a format this plugin does not know: the fallbacks hold.
	r.put("managed", "true", "format", "9", "share", "1000", "fallback."+r.uuid(0), "450", "fallback."+r.uuid(1), "300")
	r.waitFor("fallbacks for an unreadable share", func() bool {
		return r.capStat(0) == "fallback 450 W: share unreadable" && r.capStat(1) == "fallback 300 W: share unreadable"
	})
	// Readable again, then the lease runs out (the 1h lease item goes):
	// the fallbacks, whatever the share says.
	r.shareVar("1000", "fallback."+r.uuid(0), "450", "fallback."+r.uuid(1), "300")
	r.waitFor("the share held again", func() bool { return r.capStat(1) == "capped 300 W by node share 1000 W" })
	r.beat("1s")
	r.waitFor("fallbacks on lease loss", func() bool {
		return r.capStat(0) == "fallback 450 W: controller lost" && r.capStat(1) == "fallback 300 W: controller lost"
	})
	for i, want := range []uint32{450000, 300000} {
		if got := r.limitMW(i); got != want {
			t.Errorf("GPU %d after lease loss: %d mW, want %d (%s)", i, got, want, fmt.Sprint(r.states()))
		}
	}
}
