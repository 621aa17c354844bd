// Package benchstat holds what the measuring tools under bench/ share:
// quantiles, the median and spread of rounds, and the machine's load
// average.
package benchstat

import (
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Quantile is the q-quantile of ds (the smallest value with at least a q
// share of ds at or below it), or 0 for none.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// Spread is the median, least and greatest of xs.
func Spread(xs []float64) (med, lo, hi float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}

// LoadAvg is /proc/loadavg's three load averages, or "unknown".
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// MS is d in whole milliseconds, "12 ms".
func MS(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + " ms" }
