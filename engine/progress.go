package engine

import (
	"regexp"
	"strconv"
)

// Progress is one load-progress report found in an engine's log.
type Progress struct {
	// What is being loaded, as the engine says it ("safetensors checkpoint
	// shards").
	What string
	// Percent is 0–100.
	Percent int
	// Done and Total count shards when the line says so (0 otherwise).
	Done, Total int
}

// shardRE matches the tqdm lines vLLM and SGLang print while loading
// weights ("Loading safetensors checkpoint shards:  50% Completed | 1/2
// [...]") and the ones transformers prints ("Loading checkpoint shards:
// 50%|█████     | 1/2 [...]").
var shardRE = regexp.MustCompile(`Loading ((?:[A-Za-z0-9_.-]+ )?checkpoint shards):\s*(\d{1,3})%(?:[^0-9]*?(\d+)/(\d+))?`)

// ParseProgress recognises load progress in one log line.
func ParseProgress(line string) (Progress, bool) {
	m := shardRE.FindStringSubmatch(line)
	if m == nil {
		return Progress{}, false
	}
	pct, err := strconv.Atoi(m[2])
	if err != nil || pct > 100 {
		return Progress{}, false
	}
	p := Progress{What: m[1], Percent: pct}
	if m[3] != "" {
		p.Done, _ = strconv.Atoi(m[3])
		p.Total, _ = strconv.Atoi(m[4])
	}
	return p, true
}
