package controller

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// forEach calls f(i) for every i in [0, n), at most workers at a time,
// and returns once all calls have; it starts no new call once ctx ends.
// The Nomad reads a pass depends on (nodes, checks, power) go through it,
// so one slow client holds up only its own read.
func forEach(ctx context.Context, n, workers int, f func(i int)) {
	var g errgroup.Group
	g.SetLimit(max(workers, 1))
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error { f(i); return nil })
	}
	_ = g.Wait()
}
