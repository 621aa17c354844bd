package controller

import (
	"context"
	"sync"
	"sync/atomic"
)

// forEach calls f(i) for every i in [0, n), at most workers at a time,
// and returns once all calls have; it starts no new call once ctx ends.
// The Nomad reads a pass depends on (nodes, checks, power) go through it,
// so one slow client holds up only its own read.
func forEach(ctx context.Context, n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
}
