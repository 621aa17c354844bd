package facility

import (
	"fmt"
	"math"
	"time"
)

// CountMode says how a budget counts the shards in its domain
// (docs/power.md, "Measured admission").
type CountMode uint8

const (
	// CountDefault, on a budget, takes the facility's count; on the
	// facility it is CountDeclared.
	CountDefault CountMode = iota
	// CountDeclared counts a shard at its declared draw (profile watts,
	// or gpus × power_limit).
	CountDeclared
	// CountMeasured counts a shard at what shards of its profile on its
	// GPU model have drawn (Learned), plus a margin, once enough samples
	// are in; at its declared draw until then.
	CountMeasured
)

// String returns "declared", "measured", or "" for CountDefault.
func (m CountMode) String() string {
	switch m {
	case CountDeclared:
		return "declared"
	case CountMeasured:
		return "measured"
	}
	return ""
}

// ParseCountMode reads "declared" or "measured".
func ParseCountMode(s string) (CountMode, error) {
	switch s {
	case "declared":
		return CountDeclared, nil
	case "measured":
		return CountMeasured, nil
	}
	return CountDefault, fmt.Errorf("count: %q: want \"declared\" or \"measured\"", s)
}

// Measured is how measured counting learns and pads a shard's draw: the
// Percentile of what shards of a profile on a GPU model drew over Window,
// times 1 + Margin, once at least MinSamples samples are in.
type Measured struct {
	Percentile float64       // in [50, 100]
	Window     time.Duration // from 1m to 7d
	Margin     float64       // in [0, 1]
	MinSamples int           // from 1 to 1e9
	Pos        Pos
}

// The defaults of a measured block, and the ranges of its fields.
const (
	DefaultPercentile = 95
	DefaultWindow     = time.Hour
	DefaultMargin     = 0.10
	// DefaultMinSamples: below 100 samples a 95th percentile rests on fewer
	// than five readings above it.
	DefaultMinSamples = 100

	minPercentile, maxPercentile = 50, 100
	minWindow, maxWindow         = time.Minute, 7 * 24 * time.Hour
	maxMargin                    = 1
	maxMinSamples                = 1_000_000_000
)

// DefaultMeasured returns the measured rule facility.hcl gets when it says
// nothing: 95th percentile over 1h, margin 0.10, at least 100 samples.
func DefaultMeasured() Measured {
	return Measured{Percentile: DefaultPercentile, Window: DefaultWindow, Margin: DefaultMargin, MinSamples: DefaultMinSamples}
}

func (m Measured) check() []string {
	var bad []string
	if math.IsNaN(m.Percentile) || m.Percentile < minPercentile || m.Percentile > maxPercentile {
		bad = append(bad, fmt.Sprintf("percentile must be from %d to %d, got %v", minPercentile, maxPercentile, m.Percentile))
	}
	if err := checkDuration("window", m.Window, minWindow, maxWindow); err != nil {
		bad = append(bad, err.Error())
	}
	if math.IsNaN(m.Margin) || m.Margin < 0 || m.Margin > maxMargin {
		bad = append(bad, fmt.Sprintf("margin must be from 0 to %d, got %v", maxMargin, m.Margin))
	}
	if err := checkInt("min_samples", m.MinSamples, 1, maxMinSamples); err != nil {
		bad = append(bad, err.Error())
	}
	return bad
}

// Count returns the facility's default count: CountDeclared unless set.
func (f Facility) countDefault() CountMode {
	if f.Count == CountDefault {
		return CountDeclared
	}
	return f.Count
}

// CountOf returns how budget b counts: its own count, else the facility's,
// else CountDeclared.
func (f Facility) CountOf(b Budget) CountMode {
	if b.Count != CountDefault {
		return b.Count
	}
	return f.countDefault()
}

// MeasuredRule returns the facility's measured block, or DefaultMeasured.
func (f Facility) MeasuredRule() Measured {
	if f.Measured != nil {
		return *f.Measured
	}
	return DefaultMeasured()
}

// LearnedKey names what a learned draw is of: shards of profile Profile of
// model Model on GPUs of model GPU (the device name, such as "NVIDIA H200").
// The controller's replicas carry model and profile names (job meta), so
// the key is made of them: a profile changed in place (new args) keeps
// what was learned of it.
type LearnedKey struct {
	Model, Profile, GPU string
}

// String returns "model/profile on GPU".
func (k LearnedKey) String() string { return k.Model + "/" + k.Profile + " on " + k.GPU }

// Learned is the learned draw of one shard (all its GPUs together) of a
// profile on a GPU model: the measured rule's percentile, and how many
// samples it rests on.
type Learned struct {
	LearnedKey
	Watts   float64
	Samples int
	Pos     Pos
}

func (l Learned) check() []string {
	var bad []string
	if err := checkName("model", l.Model); err != nil {
		bad = append(bad, err.Error())
	}
	if err := checkName("profile", l.Profile); err != nil {
		bad = append(bad, err.Error())
	}
	if l.GPU == "" {
		bad = append(bad, "gpu must name a GPU model")
	}
	if err := checkWatts("watts", l.Watts, false); err != nil {
		bad = append(bad, err.Error())
	}
	if err := checkInt("samples", l.Samples, 0, math.MaxInt32); err != nil {
		bad = append(bad, err.Error())
	}
	return bad
}

// validateLearned reports bad or duplicate learned draws, each at its Pos.
func validateLearned(ls []Learned) []error {
	var errs []error
	first := map[LearnedKey]Pos{}
	for _, l := range ls {
		for _, b := range l.check() {
			errs = append(errs, errAt(l.Pos, fmt.Sprintf("learned %s: %s", l.LearnedKey, b)))
		}
		if p, dup := first[l.LearnedKey]; dup {
			errs = append(errs, errAt(l.Pos, fmt.Sprintf("learned %s: duplicate (first at %s)", l.LearnedKey, p)))
		} else {
			first[l.LearnedKey] = l.Pos
		}
	}
	return errs
}

// countedTable is what a measured domain counts a shard at, per key: the
// learned watts × (1 + margin), for keys with at least MinSamples samples
// and sane watts. A key not in it counts at its declared draw.
func countedTable(ls []Learned, m Measured) map[LearnedKey]float64 {
	out := map[LearnedKey]float64{}
	for _, l := range ls {
		if l.Samples < m.MinSamples || len(l.check()) > 0 {
			continue
		}
		w := l.Watts * (1 + m.Margin)
		if old, ok := out[l.LearnedKey]; ok {
			w = max(w, old) // a duplicate: the larger, to be safe
		}
		out[l.LearnedKey] = w
	}
	return out
}

// counted returns what one shard of declared draw w counts at in each
// mode: [declared, measured].
func counted(table map[LearnedKey]float64, k LearnedKey, w float64) [2]float64 {
	if m, ok := table[k]; ok {
		return [2]float64{w, m}
	}
	return [2]float64{w, w}
}
