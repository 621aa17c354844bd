package controller

import (
	"context"
	"sync"
	"testing"
)

func TestForEach(t *testing.T) {
	var mu sync.Mutex
	inFlight, most := 0, 0
	seen := make([]int, 50)
	release := make(chan struct{})
	started := make(chan struct{}, 50)
	done := make(chan struct{})
	go func() {
		defer close(done)
		forEach(t.Context(), len(seen), 4, func(i int) {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			mu.Unlock()
			started <- struct{}{}
			<-release
			mu.Lock()
			inFlight--
			seen[i]++
			mu.Unlock()
		})
	}()
	for range 4 {
		<-started // four calls run at once before any is released
	}
	close(release)
	<-done
	if most != 4 {
		t.Errorf("at most %d calls at once, want 4", most)
	}
	for i, n := range seen {
		if n != 1 {
			t.Errorf("f(%d) called %d times", i, n)
		}
	}

	// A context that has ended starts nothing.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	calls := 0
	forEach(ctx, 10, 2, func(int) { calls++ })
	if calls != 0 {
		t.Errorf("%d calls after the context ended", calls)
	}
}
