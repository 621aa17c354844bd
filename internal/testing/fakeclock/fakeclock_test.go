package fakeclock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/testing/fakeclock"
)

func TestClockMovesOnlyWhenMoved(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := fakeclock.New(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now = %v, want %v", got, start)
	}
	c.Advance(90 * time.Second)
	if got, want := c.Now(), start.Add(90*time.Second); !got.Equal(want) {
		t.Errorf("after Advance(90s): Now = %v, want %v", got, want)
	}
	c.Advance(-30 * time.Second)
	if got, want := c.Now(), start.Add(time.Minute); !got.Equal(want) {
		t.Errorf("after Advance(-30s): Now = %v, want %v", got, want)
	}
	at := start.Add(24 * time.Hour)
	c.Set(at)
	if got := c.Now(); !got.Equal(at) {
		t.Errorf("after Set: Now = %v, want %v", got, at)
	}
	if got := c.Reads(); got != 4 {
		t.Errorf("Reads = %d after 4 calls of Now, want 4", got)
	}
}

// TestClockConcurrentUse reads and moves one clock from several
// goroutines (run with -race): every read is counted, and the clock ends
// where all the moves put it.
func TestClockConcurrentUse(t *testing.T) {
	c := fakeclock.New(time.Unix(0, 0))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Second)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	if got := c.Reads(); got != 800 {
		t.Errorf("Reads = %d, want 800", got)
	}
	if got, want := c.Now(), time.Unix(800, 0); !got.Equal(want) {
		t.Errorf("Now = %v, want %v", got, want)
	}
}
