package suggest

import "testing"

func TestHint(t *testing.T) {
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
	if d := Distance("kitten", "sitting"); d != 3 {
		t.Errorf("Distance(kitten, sitting) = %d, want 3", d)
	}
}
