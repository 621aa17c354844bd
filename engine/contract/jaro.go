package contract

// jaro is the Jaro similarity of a and b (0 to 1) over their characters,
// as clap's suggestions compute it: characters match when equal and no
// farther apart than max(len)/2 - 1, each at most once; transpositions are
// half the matched characters that are out of order.
func jaro(a, b string) float64 {
	ra, rb := []rune(a), []rune(b)
	la, lb := len(ra), len(rb)
	switch {
	case la == 0 && lb == 0:
		return 1
	case la == 0 || lb == 0:
		return 0
	}
	window := max(max(la, lb)/2-1, 0)
	ma, mb := make([]bool, la), make([]bool, lb)
	matches := 0
	for i := range ra {
		lo, hi := max(i-window, 0), min(i+window+1, lb)
		for j := lo; j < hi; j++ {
			if !mb[j] && ra[i] == rb[j] {
				ma[i], mb[j] = true, true
				matches++
				break
			}
		}
	}
	if matches == 0 {
		return 0
	}
	half, j := 0, 0
	for i := range ra {
		if !ma[i] {
			continue
		}
		for !mb[j] {
			j++
		}
		if ra[i] != rb[j] {
			half++
		}
		j++
	}
	m := float64(matches)
	return (m/float64(la) + m/float64(lb) + (m-float64(half/2))/m) / 3
}
