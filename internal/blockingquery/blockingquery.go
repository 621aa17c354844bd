// Package blockingquery runs the blocking-query loop that Nomad's and
// Consul's HTTP APIs share: ask with the last index seen and a wait, get
// an answer when the index passes it (or the wait runs out), start over
// when the index goes backwards, and back off after a failure. The
// controller's watches of Nomad and the gateway's Nomad and Consul
// discovery run on it. Its Backoff and Sleep are the project's one
// doubling backoff and one sleep that a context cuts short (the device
// plugin's NVML init retries use them too).
package blockingquery

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/nomad/api"
)

// DefaultWait is the wait of a query when Watch.Wait is zero: the longest
// Nomad and Consul allow.
const DefaultWait = 5 * time.Minute

// MinGap spaces the queries of a watch that answered without moving the
// index, so that a server that answers at once cannot make a watch spin.
const MinGap = 50 * time.Millisecond

// Deadline bounds one query of the given wait on the client's side. The
// servers answer within the wait plus their jitter (up to 1/16 of it), so
// a query still open past this hangs on a dead connection (a server that
// restarted, a cut network) and is abandoned.
func Deadline(wait time.Duration) time.Duration {
	return wait + wait/16 + 30*time.Second
}

// Query is one blocking query: answer once the index passes Index, or
// after Wait.
type Query struct {
	Index uint64
	Wait  time.Duration
}

// Fetch runs one query within ctx and returns the answer and its index.
type Fetch[T any] func(ctx context.Context, q Query) (T, uint64, error)

// Watch runs one blocking query after another until its context ends.
type Watch[T any] struct {
	// Wait is each query's wait; DefaultWait when zero.
	Wait time.Duration
	// Backoff spaces the queries after failures; its zero value backs off
	// from 500ms to 30s.
	Backoff Backoff
	// Unchanged delivers the answers whose index did not move too (a
	// query that waited its Wait out), for a caller that does something
	// on every answer; by default only the first answer and those whose
	// index moved are delivered.
	Unchanged bool

	// Fetch runs each query.
	Fetch Fetch[T]
	// OnAnswer is called with each answer delivered and its index.
	OnAnswer func(v T, index uint64)
	// OnError, if set, is called with each failure (except one that ends
	// with the context) and how long the watch waits before it asks again.
	OnError func(err error, retryIn time.Duration)
}

// Run queries until ctx ends. Each query gets Deadline(Wait). An answer
// whose index went backwards (a snapshot restore, a new cluster behind the
// same address) is dropped and the next query is a plain read (index 0),
// whose answer is delivered. An index of 0 is never waited on: it counts
// as 1. Run never polls at a fixed rate: an idle cluster costs one open
// request per watch.
func (w *Watch[T]) Run(ctx context.Context) {
	wait := w.Wait
	if wait <= 0 {
		wait = DefaultWait
	}
	bo := w.Backoff
	bo.Reset()
	var index uint64
	for ctx.Err() == nil {
		start := time.Now()
		qctx, cancel := context.WithTimeout(ctx, Deadline(wait))
		v, got, err := w.Fetch(qctx, Query{Index: index, Wait: wait})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			d := bo.Next()
			if w.OnError != nil {
				w.OnError(err, d)
			}
			if !Sleep(ctx, d) {
				return
			}
			continue
		}
		bo.Reset()
		if got < index {
			index = 0
			continue
		}
		changed := got != index || index == 0
		if changed || w.Unchanged {
			w.OnAnswer(v, got)
		}
		index = max(got, 1)
		if !changed {
			Sleep(ctx, MinGap-time.Since(start))
		}
	}
}

// Backoff is a wait after failures that doubles, from First to Max. Its
// zero value backs off from 500ms to 30s.
type Backoff struct {
	First, Max time.Duration
	d          time.Duration
}

// Next returns the wait after one more failure: First after the first,
// twice the last after each next, at most Max.
func (b *Backoff) Next() time.Duration {
	first, most := b.First, b.Max
	if first <= 0 {
		first = 500 * time.Millisecond
	}
	if most <= 0 {
		most = 30 * time.Second
	}
	b.d = min(max(2*b.d, first), most)
	return b.d
}

// Reset starts over after a success: the next failure waits First.
func (b *Backoff) Reset() { b.d = 0 }

// Wait sleeps Next(); it returns false when ctx ended first.
func (b *Backoff) Wait(ctx context.Context) bool { return Sleep(ctx, b.Next()) }

// Sleep waits d or until ctx ends, and reports whether d passed. A d of
// zero or less returns at once, true unless ctx has ended.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// errNoMeta fails a call that returned neither an error nor the query
// meta that holds the index.
var errNoMeta = errors.New("nomad answered without query meta")

// Nomad makes a Fetch of a nomad/api call: call gets query options with
// the query's WaitIndex, WaitTime and context, and may set the rest
// (namespace, region, filters).
func Nomad[T any](call func(q *api.QueryOptions) (T, *api.QueryMeta, error)) Fetch[T] {
	return func(ctx context.Context, q Query) (T, uint64, error) {
		v, meta, err := call((&api.QueryOptions{WaitIndex: q.Index, WaitTime: q.Wait}).WithContext(ctx))
		if err != nil {
			return v, 0, err
		}
		if meta == nil {
			return v, 0, errNoMeta
		}
		return v, meta.LastIndex, nil
	}
}
