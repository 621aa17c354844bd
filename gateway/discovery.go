package gateway

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/llmgw/llmgw/internal/blockingquery"
)

// discoveryBackoff spaces the Consul and Nomad sources' queries, and the
// Consul registration's tries, after failures: 500ms doubling to 30s.
func discoveryBackoff() blockingquery.Backoff {
	return blockingquery.Backoff{First: 500 * time.Millisecond, Max: 30 * time.Second}
}

// catalog maps a watched service's key to the models its tags name.
type catalog map[string][]string

// watchFunc watches one service until ctx ends, emitting its healthy
// instances whenever they change; ok=false reports a failed fetch (what
// was emitted before still stands).
type watchFunc func(ctx context.Context, key string, emit func(insts []Instance, ok bool))

// listFunc watches the catalog until ctx ends, emitting the services to
// watch whenever they change.
type listFunc func(ctx context.Context, emit func(catalog))

// runDiscovery runs list, one watch per service it names, and publishes
// the merged snapshot after each change. The first publish waits until the
// catalog and every service in it have been fetched once (or failed once),
// so the gateway never starts with a catalog but no replicas. It returns
// when ctx ends and every goroutine it started has.
func runDiscovery(ctx context.Context, log *slog.Logger, list listFunc, watch watchFunc, publish func(Snapshot)) error {
	type event struct {
		cat   catalog // a catalog event when non-nil
		w     *watcher
		insts []Instance
		ok    bool
	}
	events := make(chan event)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	send := func(ctx context.Context, e event) {
		select {
		case events <- e:
		case <-ctx.Done():
		}
	}
	wg.Go(func() {
		list(ctx, func(c catalog) {
			if c == nil {
				c = catalog{}
			}
			send(ctx, event{cat: c})
		})
	})

	watchers := map[string]*watcher{}
	var cat catalog
	var last Snapshot
	synced := false
	for {
		var e event
		select {
		case <-ctx.Done():
			for _, w := range watchers {
				w.stop()
			}
			return nil
		case e = <-events:
		}
		if e.cat != nil {
			cat = e.cat
			for key, w := range watchers {
				if _, ok := cat[key]; !ok {
					w.stop()
					delete(watchers, key)
					log.Debug("stopped watching service", "service", key)
				}
			}
			for key := range cat {
				if watchers[key] != nil {
					continue
				}
				wctx, wcancel := context.WithCancel(ctx)
				w := &watcher{cancel: wcancel}
				watchers[key] = w
				log.Debug("watching service", "service", key)
				wg.Go(func() {
					watch(wctx, key, func(insts []Instance, ok bool) {
						send(wctx, event{w: w, insts: insts, ok: ok})
					})
				})
			}
		} else {
			if e.w.stopped {
				continue // a watcher stopped since it sent this
			}
			e.w.fetched = true
			if e.ok {
				e.w.insts = e.insts
			}
		}
		if cat == nil {
			continue
		}
		if !synced && !allFetched(watchers) {
			continue
		}
		snap := merge(cat, watchers).normalize()
		if synced && slices.Equal(snap.Models, last.Models) && slices.Equal(snap.Instances, last.Instances) {
			continue
		}
		synced, last = true, snap
		publish(snap)
	}
}

// watcher is one service's watch, as runDiscovery's loop sees it; only
// that loop touches it.
type watcher struct {
	cancel  context.CancelFunc
	stopped bool
	fetched bool
	insts   []Instance
}

func (w *watcher) stop() {
	w.stopped = true
	w.cancel()
}

func allFetched(ws map[string]*watcher) bool {
	for _, w := range ws {
		if !w.fetched {
			return false
		}
	}
	return true
}

func merge(cat catalog, watchers map[string]*watcher) Snapshot {
	var s Snapshot
	for _, key := range slices.Sorted(maps.Keys(cat)) {
		s.Models = append(s.Models, cat[key]...)
		if w := watchers[key]; w != nil {
			s.Instances = append(s.Instances, w.insts...)
		}
	}
	return s
}
