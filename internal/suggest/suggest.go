// Package suggest finds the names closest to a mistyped one, for error
// hints such as "did you mean gpu-1, gpu-2?". The controller's API and
// llmgw ctl share it.
package suggest

import (
	"slices"
	"strings"
)

// Hint returns "did you mean a, b, c?" with up to three of names nearest
// to s by edit distance (ties by name), or "" when none is near enough.
func Hint(s string, names []string) string {
	type cand struct {
		name string
		d    int
	}
	cs := make([]cand, 0, len(names))
	for _, n := range names {
		cs = append(cs, cand{n, Distance(s, n)})
	}
	slices.SortFunc(cs, func(a, b cand) int {
		if a.d != b.d {
			return a.d - b.d
		}
		return strings.Compare(a.name, b.name)
	})
	var out []string
	for i := 0; i < len(cs) && i < 3; i++ {
		if cs[i].d <= max(3, len(s)/2) {
			out = append(out, cs[i].name)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "did you mean " + strings.Join(out, ", ") + "?"
}

// Distance is the Levenshtein distance between a and b, in bytes.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
