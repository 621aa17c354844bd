package store

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
)

func TestDecisionPathIsAValidVariablePath(t *testing.T) {
	t.Parallel()
	valid := regexp.MustCompile("^[a-zA-Z0-9-_~/]{1,128}$") // Nomad's rule
	for replica, want := range map[string]string{
		"llama-3.1-70b-0": "llmgw/decisions/llama-3~2e1-70b-0",
		"qwen_7b-12":      "llmgw/decisions/qwen_7b-12",
		"a/b~c-1":         "llmgw/decisions/a~2fb~7ec-1",
	} {
		got := DecisionPath(replica)
		if got != want {
			t.Errorf("DecisionPath(%q) = %q, want %q", replica, got, want)
		}
		if !valid.MatchString(got) {
			t.Errorf("%q is not a valid Nomad variable path", got)
		}
	}
	if DecisionPath("a.b") == DecisionPath("a~2eb") {
		t.Error("escaping is not reversible: two replicas share a path")
	}
}

// Pins are kept per model in one variable, check-and-set: a second pin of
// a model replaces the first, releases and expiries remove only theirs,
// and two writers racing lose nothing.
func TestPins(t *testing.T) {
	t.Parallel()
	fake := nomadfake.New()
	t.Cleanup(fake.Close)
	s := New(fake.Client(t).Variables(), "")
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if ps, err := s.Pins(); err != nil || ps != nil {
		t.Fatalf("Pins before any: %v, %v", ps, err)
	}
	for _, p := range []controllerapi.Pin{
		{Model: "beta", Replicas: 2, Until: t0.Add(time.Hour), SetAt: t0, SetBy: "ann"},
		{Model: "alpha", Replicas: 3, Until: t0.Add(time.Minute), SetAt: t0},
		{Model: "beta", Replicas: 4, Until: t0.Add(2 * time.Hour), SetAt: t0, Reason: "launch"},
	} {
		if err := s.SetPin(p); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := s.Pins()
	if err != nil {
		t.Fatal(err)
	}
	want := []controllerapi.Pin{
		{Model: "alpha", Replicas: 3, Until: t0.Add(time.Minute), SetAt: t0},
		{Model: "beta", Replicas: 4, Until: t0.Add(2 * time.Hour), SetAt: t0, Reason: "launch"},
	}
	if diff := cmp.Diff(want, ps); diff != "" {
		t.Errorf("pins (-want +got):\n%s", diff)
	}
	if !ps[0].Active(t0) || ps[0].Active(t0.Add(time.Minute)) {
		t.Error("a pin is active before its Until and not from it on")
	}

	gone, err := s.DropExpiredPins(t0.Add(30 * time.Second))
	if err != nil || len(gone) != 0 {
		t.Fatalf("DropExpiredPins before any expired: %v, %v", gone, err)
	}
	gone, err = s.DropExpiredPins(t0.Add(time.Minute))
	if err != nil || len(gone) != 1 || gone[0].Model != "alpha" {
		t.Fatalf("DropExpiredPins after alpha's: %v, %v; want alpha's", gone, err)
	}
	if found, err := s.ReleasePin("alpha"); err != nil || found {
		t.Errorf("ReleasePin(alpha) after it expired: %v, %v; want not found", found, err)
	}
	if found, err := s.ReleasePin("beta"); err != nil || !found {
		t.Errorf("ReleasePin(beta): %v, %v; want found", found, err)
	}
	if ps, err := s.Pins(); err != nil || len(ps) != 0 {
		t.Errorf("pins after both went: %v, %v", ps, err)
	}

	// Writers racing: every pin lands.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			errs[i] = s.SetPin(controllerapi.Pin{Model: fmt.Sprintf("m%d", i), Replicas: i, Until: t0.Add(time.Hour)})
		})
	}
	wg.Wait()
	ps, _ = s.Pins()
	for i, err := range errs {
		if err != nil && !errors.Is(err, ErrConflict) {
			t.Errorf("SetPin m%d: %v", i, err)
		}
	}
	landed := 0
	for i, err := range errs {
		if err == nil {
			landed++
			if !slices.ContainsFunc(ps, func(p controllerapi.Pin) bool { return p.Model == fmt.Sprintf("m%d", i) }) {
				t.Errorf("m%d's pin was acknowledged and lost: %v", i, ps)
			}
		}
	}
	if landed != len(ps) {
		t.Errorf("%d pins acknowledged, %d stored", landed, len(ps))
	}
}

func TestPowerCapsVariables(t *testing.T) {
	t.Parallel()
	fake := nomadfake.New()
	t.Cleanup(fake.Close)
	s := New(fake.Client(t).Variables(), "")
	ctx := t.Context()
	if err := s.SetNodeCaps(ctx, "gpu-1.dc1", map[string]float64{"GPU-a": 450}, map[string]float64{"GPU-a": 300, "GPU-b": 300.5}, devicesapi.NodeShare{}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetNodeCaps(ctx, "gpu-2", nil, map[string]float64{"GPU-c": 400}, devicesapi.NodeShare{Watts: 1200.5, GPUs: map[string]devicesapi.ShareItems{"GPU-c": {Floor: 250, Priority: -5}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, 45*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	v := fake.Variable("default", "llmgw/power-caps/gpu-1~2edc1")
	if v == nil {
		t.Fatal("no caps variable for gpu-1.dc1")
	}
	want := map[string]string{"managed": "true", "cap.GPU-a": "450", "fallback.GPU-a": "300", "fallback.GPU-b": "300.5"}
	if diff := cmp.Diff(want, map[string]string(v.Items)); diff != "" {
		t.Errorf("gpu-1.dc1's items (-want +got):\n%s", diff)
	}
	v2 := fake.Variable("default", "llmgw/power-caps/gpu-2")
	if v2 == nil {
		t.Fatal("no caps variable for gpu-2")
	}
	want = map[string]string{"managed": "true", "fallback.GPU-c": "400", "format": "2", "share": "1200.5", "floor.GPU-c": "250", "priority.GPU-c": "-5"}
	if diff := cmp.Diff(want, map[string]string(v2.Items)); diff != "" {
		t.Errorf("gpu-2's items, format 2 (-want +got):\n%s", diff)
	}
	if sh, err := devicesapi.ParseShare(v2.Path, v2.Items); err != nil || sh.Watts != 1200.5 || sh.GPUs["GPU-c"] != (devicesapi.ShareItems{Floor: 250, Priority: -5}) {
		t.Errorf("the plugin's parse of gpu-2's share: %+v, %v", sh, err)
	}
	hb := fake.Variable("default", "llmgw/power-caps/_heartbeat")
	if hb == nil || hb.Items["lease"] != "45s" {
		t.Fatalf("heartbeat %+v, want lease 45s", hb)
	}
	first := hb.ModifyIndex
	if err := s.Heartbeat(ctx, 45*time.Second, 2); err != nil {
		t.Fatal(err)
	}
	if hb := fake.Variable("default", "llmgw/power-caps/_heartbeat"); hb.ModifyIndex <= first {
		t.Errorf("a second beat kept the index %d", hb.ModifyIndex)
	}
	nodes, err := s.CappedNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"llmgw/power-caps/gpu-1~2edc1", "llmgw/power-caps/gpu-2"}, nodes); diff != "" {
		t.Errorf("capped nodes (-want +got):\n%s", diff)
	}
	if err := s.DeletePath(ctx, nodes[1]); err != nil {
		t.Fatal(err)
	}
	if v := fake.Variable("default", "llmgw/power-caps/gpu-2"); v != nil {
		t.Errorf("gpu-2's caps left after the delete: %+v", v)
	}
}

// TestNodeCapsWithNothingToCap: a managed node whose GPUs need neither a
// cap nor a fallback still gets its variable, with the managed item alone
// (Nomad, and the fake like it, refuse a variable without items: "variable
// missing required Items object").
func TestNodeCapsWithNothingToCap(t *testing.T) {
	t.Parallel()
	fake := nomadfake.New()
	t.Cleanup(fake.Close)
	s := New(fake.Client(t).Variables(), "")
	if err := s.SetNodeCaps(t.Context(), "gpu-3", map[string]float64{}, nil, devicesapi.NodeShare{}); err != nil {
		t.Fatal(err)
	}
	v := fake.Variable("default", "llmgw/power-caps/gpu-3")
	if v == nil {
		t.Fatal("no caps variable for gpu-3")
	}
	if diff := cmp.Diff(map[string]string{"managed": "true"}, map[string]string(v.Items)); diff != "" {
		t.Errorf("gpu-3's items (-want +got):\n%s", diff)
	}
}
