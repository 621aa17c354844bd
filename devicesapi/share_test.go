package devicesapi

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseShare(t *testing.T) {
	t.Parallel()
	s, err := ParseShare("p/n", map[string]string{"cap.GPU-a": "400", ManagedItem: "true"})
	if err != nil || s.Watts != 0 || len(s.GPUs) != 0 {
		t.Errorf("format 1: %+v, %v; want no share", s, err)
	}
	s, err = ParseShare("p/n", map[string]string{FormatItem: "2", ShareItem: "2400.5", "floor.GPU-a": "250", "priority.GPU-a": "80", "priority.GPU-b": "-1", "cap.GPU-a": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Watts != 2400.5 || s.GPUs["GPU-a"] != (ShareItems{Floor: 250, Priority: 80}) || s.GPUs["GPU-b"] != (ShareItems{Priority: -1}) {
		t.Errorf("format 2: %+v", s)
	}
	for _, c := range []struct {
		items map[string]string
		want  string
	}{
		{map[string]string{FormatItem: "3", ShareItem: "100"}, `p/n: item format = "3": this plugin knows formats 1 and 2`},
		{map[string]string{FormatItem: "2"}, "p/n: format 2 without a share item"},
		{map[string]string{FormatItem: "2", ShareItem: "-5"}, `p/n: item share = "-5" is not a power in watts`},
		{map[string]string{FormatItem: "2", ShareItem: "NaN"}, `p/n: item share = "NaN" is not a power in watts`},
		{map[string]string{FormatItem: "2", ShareItem: "100", "floor.GPU-a": "lots"}, `p/n: item floor.GPU-a = "lots" is not a power in watts`},
		{map[string]string{FormatItem: "2", ShareItem: "100", "priority.GPU-a": "1.5"}, `p/n: item priority.GPU-a = "1.5" is not an integer priority`},
		{map[string]string{FormatItem: "2", ShareItem: "100", "floor.": "1"}, `p/n: item "floor." names no GPU UUID`},
	} {
		if _, err := ParseShare("p/n", c.items); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.items, err, c.want)
		}
	}
}

func gpusOf(draws ...float64) []ShareGPU {
	out := make([]ShareGPU, len(draws))
	for i, d := range draws {
		out[i] = ShareGPU{UUID: string(rune('a' + i)), DrawWatts: d, FloorWatts: 200, MaxWatts: 700}
	}
	return out
}

func sum(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

func TestSplitShareLowersTheLowestPriorityFirst(t *testing.T) {
	t.Parallel()
	g := gpusOf(600, 600, 600, 100)
	g[0].Priority, g[1].Priority, g[2].Priority, g[3].Priority = 80, 30, 30, 30
	want := []float64{600, 600, 600, 115}
	// 1,900 W over 4 GPUs of 700 W: 900 W to take. First every GPU's
	// room above its want, the lowest priority first: the idle GPU
	// (priority 30) 700 → 200 (its floor is above its want), the two busy
	// priority-30 GPUs 700 → 600, then the priority-80 GPU 700 → 600: 800
	// W. The last 100 W come off the lowest priority below its want, toward
	// its floors: the two busy priority-30 GPUs to 550.
	caps := SplitShare(1900, g, want)
	if caps[0] != 600 || caps[3] != 200 || caps[1] != 550 || caps[2] != 550 {
		t.Errorf("caps %v, want [600 550 550 200]", caps)
	}
	// 2,100 W: the room above the wants is enough; the lowest priority's
	// first (700 W), then 100 of the priority-80 GPU's 700 − 600.
	if caps := SplitShare(2100, g, want); caps[0] != 700 || caps[1] != 600 || caps[2] != 600 || caps[3] != 200 {
		t.Errorf("share 2100: caps %v, want [700 600 600 200]", caps)
	}
	// Every floor over the share: all at their floors.
	caps = SplitShare(500, g, want)
	for i, c := range caps {
		if c != 200 {
			t.Errorf("share under the floors: GPU %d at %v, want its floor 200", i, c)
		}
	}
	// Room for all at max: nothing lowered.
	if caps := SplitShare(2800, g, want); sum(caps) != 2800 {
		t.Errorf("share of the max: %v", caps)
	}
}

func TestShareHolderEngagesHoldsAndLifts(t *testing.T) {
	t.Parallel()
	h := NewShareHolder(ShareConfig{})
	t0 := time.Unix(0, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// 4 GPUs, share 1,600 W: 300 each is 1,200 (75 %): no caps.
	if caps := h.Step(at(0), 1600, gpusOf(300, 300, 300, 300)); sum(caps) != 0 || h.Engaged() {
		t.Fatalf("under the share: caps %v", caps)
	}
	// 1,900 W drawn: over; caps at once, summing to at most the share.
	g := gpusOf(700, 600, 300, 300)
	caps := h.Step(at(1), 1600, g)
	if !h.Engaged() || sum(caps) > 1600 {
		t.Fatalf("over the share: caps %v (sum %v), engaged %v", caps, sum(caps), h.Engaged())
	}
	for i, c := range caps {
		if c < 200 || c > 700 {
			t.Errorf("GPU %d capped at %v, outside [200, 700]", i, c)
		}
	}
	// Between lift and engage (1,400 W of 1,600: 87.5 %): still capped.
	if caps := h.Step(at(2), 1600, gpusOf(350, 350, 350, 350)); !h.Engaged() || sum(caps) > 1600 {
		t.Fatalf("between the lines: caps %v, engaged %v", caps, h.Engaged())
	}
	// Under 85 % (1,200 W): capped until 30 s have passed under it.
	for s := 3; s < 33; s++ {
		if h.Step(at(s), 1600, gpusOf(300, 300, 300, 300)); !h.Engaged() {
			t.Fatalf("lifted at %d s, after %d s under the lift line; the hold is 30 s", s, s-3)
		}
	}
	if caps := h.Step(at(33), 1600, gpusOf(300, 300, 300, 300)); h.Engaged() || sum(caps) != 0 {
		t.Errorf("after 30 s under the lift line: caps %v, engaged %v", caps, h.Engaged())
	}
	// A share the GPUs cannot draw past: never capped.
	if caps := h.Step(at(40), 2800, gpusOf(700, 700, 700, 700)); sum(caps) != 0 {
		t.Errorf("share of every max: caps %v", caps)
	}
}

func TestShareHolderGivesAHeldGPUItsRoom(t *testing.T) {
	t.Parallel()
	h := NewShareHolder(ShareConfig{})
	now := time.Unix(0, 0)
	// GPU 0 (priority 80) idles, GPU 1 (priority 30) draws at its max:
	// engaged; GPU 0 comes down toward its want first (its draw + 15 %).
	g := gpusOf(200, 700)
	g[0].Priority, g[1].Priority = 80, 30
	caps := h.Step(now, 900, g)
	if math.Abs(caps[0]-230) > 1e-6 || math.Abs(caps[1]-670) > 1e-6 {
		t.Fatalf("caps %v, want [230 670]", caps)
	}
	// GPU 0 rises and sits at its cap: held down, it counts at its max,
	// so the lower priority comes down to its floor.
	g[0].DrawWatts = caps[0]
	g[1].DrawWatts = caps[1]
	caps = h.Step(now.Add(time.Second), 900, g)
	if caps[1] != 200 || caps[0] != 700 {
		t.Errorf("the high priority held at its cap: caps %v, want [700 200]", caps)
	}
}

// Over random nodes, shares and draws, the caps hold the share (or every
// GPU is at its floor), each is within [floor, max], and a higher priority
// is below its want only when every lower one is at its floor.
func TestShareHolderProperty(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(38, 3))
	for it := range 3000 {
		n := 1 + rng.IntN(8)
		g := make([]ShareGPU, n)
		floors := 0.0
		for i := range g {
			mx := 300 + 400*rng.Float64()
			fl := 100 + (mx-100)*rng.Float64()
			g[i] = ShareGPU{UUID: string(rune('a' + i)), Priority: rng.IntN(3) * 10, DrawWatts: mx * rng.Float64(), FloorWatts: fl, MaxWatts: mx}
			floors += fl
		}
		share := floors * (0.5 + 1.5*rng.Float64())
		h := NewShareHolder(ShareConfig{})
		h.Step(time.Unix(0, 0), share, g)
		for i := range g {
			g[i].DrawWatts = g[i].MaxWatts // everyone wants everything
		}
		caps := h.Step(time.Unix(1, 0), share, g)
		if !h.Engaged() {
			most := 0.0
			for _, x := range g {
				most += x.MaxWatts
			}
			if most > share {
				t.Fatalf("%d: every GPU at its max (%v W) over the share %v W, not engaged", it, most, share)
			}
			continue
		}
		atFloors := true
		for i, c := range caps {
			if c < g[i].FloorWatts-1e-9 || c > g[i].MaxWatts+1e-9 {
				t.Fatalf("%d: GPU %d cap %v outside [%v, %v]", it, i, c, g[i].FloorWatts, g[i].MaxWatts)
			}
			if c > g[i].FloorWatts+1e-9 {
				atFloors = false
			}
		}
		if s := sum(caps); s > share+1e-9 && !atFloors {
			t.Fatalf("%d: caps sum %v over the share %v, not every GPU at its floor: %v", it, s, share, caps)
		}
		for i := range g {
			if caps[i] >= g[i].MaxWatts-1 {
				continue
			}
			for j := range g {
				if g[j].Priority < g[i].Priority && caps[j] > g[j].FloorWatts+1e-9 {
					t.Fatalf("%d: GPU %d (priority %d) lowered to %v while GPU %d (priority %d) is above its floor at %v", it, i, g[i].Priority, caps[i], j, g[j].Priority, caps[j])
				}
			}
		}
	}
}

// LowerByPriority lowers the lowest priority first, to one level in whole
// watts, never below a floor and never raising a cap (one already under
// its floor stays), tells which caps it lowered, touches no one outside
// members, and returns what it could not take.
func TestLowerByPriority(t *testing.T) {
	caps := []float64{700, 600, 700, 300, 700}
	floors := []float64{200, 200, 200, 400, 200}
	prio := []int{0, 0, 1, 0, 0}
	var lowered []int
	left := LowerByPriority(caps, floors, prio, []int{0, 1, 2, 3}, 300, func(i int) { lowered = append(lowered, i) })
	// Priority 0 (GPUs 0, 1, 3) gives 300: 0 and 1 come to 500 (200 and
	// 100 off); 3 is under its floor and stays; 2 (priority 1) and 4 (not
	// a member) are untouched.
	if want := []float64{500, 500, 700, 300, 700}; !slices.Equal(caps, want) || left != 0 {
		t.Fatalf("caps %v, left %v; want %v, 0", caps, left, want)
	}
	if !slices.Equal(lowered, []int{0, 1}) {
		t.Errorf("lowered %v, want [0 1]", lowered)
	}
	// More than every floor allows: all members at their floors, the rest
	// returned.
	left = LowerByPriority(caps, floors, prio, []int{0, 1, 2, 3}, 2000, nil)
	if want := []float64{200, 200, 200, 300, 700}; !slices.Equal(caps, want) || left != 2000-600-500 {
		t.Fatalf("caps %v, left %v; want %v, %v", caps, left, want, 2000-600-500)
	}
}
