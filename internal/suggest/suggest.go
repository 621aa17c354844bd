// Package suggest finds the names closest to a mistyped one, for error
// hints such as "did you mean gpu-1, gpu-2?". The controller's API and
// llmgw ctl share it.
package suggest

import (
	"slices"
	"strings"

	"github.com/agext/levenshtein"
)

// Hint returns "did you mean a, b, c?" with up to three of names nearest
// to s by edit distance (Levenshtein, in characters; ties by name), or ""
// when none is near enough: within 3 edits, or half of s's length when
// that is more.
func Hint(s string, names []string) string {
	type cand struct {
		name string
		d    int
	}
	cs := make([]cand, 0, len(names))
	for _, n := range names {
		cs = append(cs, cand{n, levenshtein.Distance(s, n, nil)})
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
