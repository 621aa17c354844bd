package facility

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// autoscaleModel is a catalog of one model with the given lines in its
// model block (before its profile); the profile starts on the line after
// them.
func autoscaleModel(lines string) string {
	return "model \"m\" {\n" + lines + "  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n  }\n}\n"
}

func TestParseAutoscale(t *testing.T) {
	t.Parallel()
	src := autoscaleModel(`  priority = 80
  routing = "prefix"
  autoscale {
    min = 0
    max = 8
    target { ttft_p90 = "800ms" }
    up_window = "20s"
    down_window = "15m"
    max_step = 3
    panic_threshold = 2.5
    idle_after = "1h"
  }
`)
	cat, err := ParseCatalog("c.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	m := cat.Models[0]
	want := &Autoscale{
		Min: 0, Max: 8, Target: Target{Kind: TargetTTFT, Value: 0.8},
		UpWindow: 20 * time.Second, DownWindow: 15 * time.Minute, MaxStep: 3, PanicThreshold: 2.5,
		IdleAfter: time.Hour, Pos: Pos{"c.hcl", 4},
	}
	if diff := cmp.Diff(want, m.Autoscale); diff != "" {
		t.Errorf("autoscale (-want +got):\n%s", diff)
	}
	if m.Routing != "prefix" {
		t.Errorf("routing %q, want prefix", m.Routing)
	}
	if m.Priority != 80 || m.Replicas != 0 || m.SlotLimit() != 8 || m.Floor() != 0 {
		t.Errorf("priority %d, replicas %d, slot limit %d, floor %d; want 80, 0 (min), 8, 0", m.Priority, m.Replicas, m.SlotLimit(), m.Floor())
	}
	if got := m.Autoscale.Target.String(); got != `ttft_p90 = "800ms"` {
		t.Errorf("target string %q", got)
	}
}

func TestParseAutoscaleDefaults(t *testing.T) {
	t.Parallel()
	cat, err := ParseCatalog("c.hcl", []byte(autoscaleModel("  autoscale {\n    max = 4\n    target { outstanding_per_replica = 8 }\n  }\n")))
	if err != nil {
		t.Fatal(err)
	}
	m := cat.Models[0]
	want := DefaultAutoscale()
	want.Max, want.Target, want.Pos = 4, Target{Kind: TargetOutstanding, Value: 8}, Pos{"c.hcl", 2}
	if diff := cmp.Diff(&want, m.Autoscale); diff != "" {
		t.Errorf("autoscale (-want +got):\n%s", diff)
	}
	if want.Min != 1 || want.UpWindow != 30*time.Second || want.DownWindow != 10*time.Minute || want.MaxStep != 2 ||
		want.PanicThreshold != 2 || want.IdleAfter != 30*time.Minute {
		t.Errorf("defaults changed: %+v (docs/controller.md lists them)", want)
	}
	if m.Priority != DefaultPriority || m.Replicas != 1 {
		t.Errorf("priority %d, replicas %d; want %d and the min, 1", m.Priority, m.Replicas, DefaultPriority)
	}
	// idle_after not given: never shorter than down_window.
	cat, err = ParseCatalog("c.hcl", []byte(autoscaleModel("  autoscale {\n    min = 0\n    max = 4\n    target { waiting_per_replica = 2 }\n    down_window = \"2h\"\n  }\n")))
	if err != nil {
		t.Fatal(err)
	}
	if got := cat.Models[0].Autoscale.IdleAfter; got != 2*time.Hour {
		t.Errorf("idle_after %s, want down_window's 2h", got)
	}
}

// Every bad autoscale input is an error naming the field and file:line,
// and nothing parses.
func TestParseAutoscaleErrors(t *testing.T) {
	t.Parallel()
	block := func(body string) string {
		return autoscaleModel("  autoscale {\n" + body + "  }\n")
	}
	const tgt = "    target { outstanding_per_replica = 8 }\n"
	tests := []struct {
		name, src, want string
	}{
		{"replicas and autoscale", autoscaleModel("  replicas = 3\n  autoscale {\n    max = 4\n" + tgt + "  }\n"),
			`c.hcl:2: model "m": replicas and autoscale are both given`},
		{"min above max", block("    min = 5\n    max = 2\n" + tgt), "c.hcl:3: autoscale: min (5) is above max (2)"},
		{"max missing", block(tgt), `c.hcl:2: Missing required argument: The argument "max" is required`},
		{"max zero", block("    max = 0\n" + tgt), "c.hcl:3: max must be between 1 and 65536, got 0"},
		{"min negative", block("    min = -1\n    max = 2\n" + tgt), "c.hcl:3: min must not be negative, got -1"},
		{"target missing", block("    max = 2\n"), "c.hcl:2: autoscale: a target block is required, with one of outstanding_per_replica, waiting_per_replica, kv_cache_use or ttft_p90"},
		{"target empty", block("    max = 2\n    target {}\n"), "c.hcl:4: autoscale: target needs one of outstanding_per_replica"},
		{"two targets", block("    max = 2\n    target {\n      kv_cache_use = 0.8\n      waiting_per_replica = 4\n    }\n"),
			"c.hcl:4: autoscale: target gives waiting_per_replica and kv_cache_use: give one"},
		{"unknown target", block("    max = 2\n    target { qps = 3 }\n"), `c.hcl:4: Unsupported argument: An argument named "qps" is not expected here.`},
		{"target zero", block("    max = 2\n    target { outstanding_per_replica = 0 }\n"), "c.hcl:4: autoscale: target outstanding_per_replica must be above 0"},
		{"kv over 1", block("    max = 2\n    target { kv_cache_use = 1.5 }\n"), "c.hcl:4: autoscale: target kv_cache_use must be above 0 and at most 1, got 1.5"},
		{"ttft not a duration", block("    max = 2\n    target { ttft_p90 = \"fast\" }\n"), `c.hcl:4: ttft_p90: "fast" is not a duration`},
		{"ttft zero", block("    max = 2\n    target { ttft_p90 = \"0s\" }\n"), "c.hcl:4: autoscale: target ttft_p90 must be above 0"},
		{"up_window short", block("    max = 2\n" + tgt + "    up_window = \"1s\"\n"), "c.hcl:5: up_window must be from 5s to 30m, got 1s"},
		{"up_window not a duration", block("    max = 2\n" + tgt + "    up_window = \"soon\"\n"), `c.hcl:5: up_window: "soon" is not a duration`},
		{"down_window long", block("    max = 2\n" + tgt + "    down_window = \"48h\"\n"), "c.hcl:5: down_window must be from 1m to 24h, got 48h"},
		{"down shorter than up", block("    max = 2\n" + tgt + "    up_window = \"10m\"\n    down_window = \"5m\"\n"),
			"c.hcl:6: autoscale: down_window (5m) is shorter than up_window (10m)"},
		{"max_step zero", block("    max = 2\n" + tgt + "    max_step = 0\n"), "c.hcl:5: max_step must be between 1 and 65536, got 0"},
		{"panic threshold 1", block("    max = 2\n" + tgt + "    panic_threshold = 1\n"), "c.hcl:5: panic_threshold must be above 1 and at most 100, got 1"},
		{"panic threshold below 1", block("    max = 2\n" + tgt + "    panic_threshold = 0.5\n"), "c.hcl:5: panic_threshold must be above 1"},
		{"idle_after with min 1", block("    max = 2\n" + tgt + "    idle_after = \"1h\"\n"), "c.hcl:5: autoscale: idle_after is only for min = 0 (scale to zero); min is 1"},
		{"idle_after under down_window", block("    min = 0\n    max = 2\n" + tgt + "    idle_after = \"5m\"\n"),
			"c.hcl:6: autoscale: idle_after (5m) is shorter than down_window (10m)"},
		{"when_idle unknown", block("    min = 0\n    max = 2\n" + tgt + "    when_idle = \"nap\"\n"),
			`c.hcl:6: autoscale: when_idle "nap": want "stop" (stop every replica) or "sleep" (keep one whose engine sleeps)`},
		{"when_idle with min 1", block("    max = 2\n" + tgt + "    when_idle = \"sleep\"\n"),
			"c.hcl:5: autoscale: when_idle is only for min = 0 (what an idle model comes to); min is 1"},
		{"when_idle sleep on vllm", block("    min = 0\n    max = 2\n" + tgt + "    when_idle = \"sleep\"\n"),
			`c.hcl:2: model "m": autoscale: when_idle = "sleep": profile p runs vllm, which has no sleep llmgw drives (llama.cpp's --sleep-idle-seconds only); use when_idle = "stop"`},
		{"priority over 100", autoscaleModel("  priority = 101\n"), "c.hcl:2: priority must be between 0 and 100, got 101"},
		{"priority fractional", autoscaleModel("  priority = 1.5\n"), "c.hcl:2: priority: Unsuitable value type"},
		{"routing unknown", autoscaleModel("  routing = \"fastest\"\n"), `c.hcl:2: model "m": routing "fastest": want "least-outstanding" or "prefix"`},
		{"routing empty", autoscaleModel("  routing = \"\"\n"), `c.hcl:2: model "m": routing "": want`},
		{"two autoscale blocks", autoscaleModel("  autoscale {\n    max = 2\n" + tgt + "  }\n  autoscale {\n    max = 2\n" + tgt + "  }\n"),
			"c.hcl:6: Duplicate autoscale block"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cat, err := ParseCatalog("c.hcl", []byte(tt.src))
			if err == nil {
				t.Fatalf("got no error, want %q", tt.want)
			}
			if len(cat.Models) != 0 {
				t.Errorf("a refused file gave %d models", len(cat.Models))
			}
			checkErrorLines(t, "c.hcl", err)
			if !containsLine(err.Error(), tt.want) {
				t.Errorf("got error:\n%v\nwant a line starting %q", err, tt.want)
			}
		})
	}
}

// Validate checks a policy built in code as the parser does.
func TestValidateAutoscale(t *testing.T) {
	t.Parallel()
	ok := DefaultAutoscale()
	ok.Max, ok.Target = 4, Target{Kind: TargetOutstanding, Value: 8}
	tests := []struct {
		name string
		edit func(a *Autoscale)
		want string // "" valid
	}{
		{"ok", func(*Autoscale) {}, ""},
		{"min above max", func(a *Autoscale) { a.Min = 5 }, "min (5) is above max (4)"},
		{"no target", func(a *Autoscale) { a.Target = Target{} }, "target needs one of"},
		{"ttft too long", func(a *Autoscale) { a.Target = Target{Kind: TargetTTFT, Value: 3600} }, "target ttft_p90 must be above 0 and at most 10m"},
		{"up window", func(a *Autoscale) { a.UpWindow = time.Hour }, "up_window must be from 5s to 30m, got 1h"},
		{"down under up", func(a *Autoscale) { a.UpWindow, a.DownWindow = 20*time.Minute, 10*time.Minute }, "down_window (10m) is shorter than up_window (20m)"},
		{"max step", func(a *Autoscale) { a.MaxStep = 0 }, "max_step must be between 1"},
		{"panic", func(a *Autoscale) { a.PanicThreshold = 1 }, "panic_threshold must be above 1"},
		{"idle under down", func(a *Autoscale) { a.Min, a.IdleAfter = 0, time.Minute }, "idle_after must be from 10m to 168h, got 1m"},
		{"idle ignored with min 1", func(a *Autoscale) { a.IdleAfter = 0 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := ok
			tt.edit(&a)
			a.Pos = Pos{"x.hcl", 7}
			cat := Catalog{Models: []Model{{Name: "m", Autoscale: &a, Profiles: []Profile{{Name: "p", Engine: "vllm", GPU: "H", GPUs: 1, Nodes: 1}}}}}
			err := cat.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("got %v, want none", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), `x.hcl:7: model "m": autoscale: `) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want x.hcl:7 and %q", err, tt.want)
			}
		})
	}
	bad := Catalog{Models: []Model{{Name: "m", Priority: -1, Profiles: []Profile{{Name: "p", Engine: "vllm", GPU: "H", GPUs: 1, Nodes: 1}}}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "priority must not be negative") {
		t.Errorf("priority -1: got %v", err)
	}
}

// when_idle = "sleep" on llama.cpp: parsed, and the policy sleeps.
func TestParseWhenIdleSleep(t *testing.T) {
	t.Parallel()
	src := "model \"m\" {\n  source = \"/models/m.gguf\"\n  autoscale {\n    min = 0\n    max = 2\n    target { outstanding_per_replica = 8 }\n    when_idle = \"sleep\"\n  }\n" +
		"  profile \"p\" {\n    engine = \"llamacpp\"\n    gpu = \"H\"\n  }\n}\n"
	cat, err := ParseCatalog("c.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if a := cat.Models[0].Autoscale; !a.Sleeps() || a.WhenIdle != IdleSleep {
		t.Errorf("policy %+v does not sleep", a)
	}
}

// Sleeping when idle changes what the task runs (the engine's sleep flag
// from idle_after), so it changes the profile's fingerprint; a model that
// does not sleep keeps its own.
func TestSleepJoinsTheFingerprint(t *testing.T) {
	t.Parallel()
	p := Profile{Name: "p", Engine: "llamacpp", GPU: "H", GPUs: 1, Nodes: 1}
	a := DefaultAutoscale()
	a.Min, a.Max = 0, 2
	m := Model{Name: "m", Source: "/m.gguf", Autoscale: &a}
	awake := ProfileFingerprint(m, p)
	a.WhenIdle = IdleStop
	if ProfileFingerprint(m, p) != awake {
		t.Error("when_idle = stop changed the fingerprint")
	}
	a.WhenIdle = IdleSleep
	asleep := ProfileFingerprint(m, p)
	if asleep == awake {
		t.Error("when_idle = sleep left the fingerprint as it was")
	}
	a.IdleAfter *= 2
	if ProfileFingerprint(m, p) == asleep {
		t.Error("another idle_after left a sleeping model's fingerprint as it was")
	}
}
