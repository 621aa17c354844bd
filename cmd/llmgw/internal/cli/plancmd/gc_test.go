package plancmd

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestCollectLessOften: the command raises the collector's target to
// planGCPercent, unless GOGC is set, which it leaves to the runtime.
func TestCollectLessOften(t *testing.T) {
	const start = 100
	for _, tt := range []struct {
		name  string
		gogc  *string
		after int
	}{
		{"GOGC unset", nil, planGCPercent},
		{"GOGC set", new("100"), start},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GOGC", "") // restored after the test
			if tt.gogc == nil {
				if err := os.Unsetenv("GOGC"); err != nil {
					t.Fatal(err)
				}
			} else {
				t.Setenv("GOGC", *tt.gogc)
			}
			prev := debug.SetGCPercent(start)
			t.Cleanup(func() { debug.SetGCPercent(prev) })
			collectLessOften()
			if got := debug.SetGCPercent(start); got != tt.after {
				t.Errorf("GC percent after: %d, want %d", got, tt.after)
			}
		})
	}
}
