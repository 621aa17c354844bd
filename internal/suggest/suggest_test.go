package suggest

import "testing"

func TestHint(t *testing.T) {
	t.Parallel()
	names := []string{"gpu-1", "gpu-2", "gpu-10", "rack=r01-k01", "cpu-box"}
	for _, tc := range []struct{ in, want string }{
		{"gpu-3", "did you mean gpu-1, gpu-2, gpu-10?"},
		{"rack=r01-k1", "did you mean rack=r01-k01?"},
		{"something-else-entirely", ""},
	} {
		if got := Hint(tc.in, names); got != tc.want {
			t.Errorf("Hint(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// kitten → sitting is 3 edits, the threshold for a 6-letter name;
	// one more is past it.
	for _, tc := range []struct{ in, name, want string }{
		{"kitten", "sitting", "did you mean sitting?"},
		{"kitten", "sittings", ""},
	} {
		if got := Hint(tc.in, []string{tc.name}); got != tc.want {
			t.Errorf("Hint(%q, [%q]) = %q, want %q", tc.in, tc.name, got, tc.want)
		}
	}
}
