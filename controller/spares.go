package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/reconcile"
	"github.com/llmgw/llmgw/controller/render"
)

// spareRetry is how long a warm spare's fetch job that ended without the
// weights on its node (refused by the hub, a full disk or budget, evicted
// since) waits before the controller asks again.
const spareRetry = 10 * time.Minute

// keepSpares has each warm spare's weights fetched (the pass's
// Result.Spares, reconcile.Spares's picks): a batch fetch job (render.FetchJob) on every spare node
// whose store lacks them, registered only if absent, or again once an
// ended one is spareRetry old. The leader's write, inside its lease, as
// the pass's.
func (c *Controller) keepSpares(ctx context.Context, fenced bool, in reconcile.Input, spares []reconcile.Spare) error {
	if len(spares) == 0 {
		return nil
	}
	jobs := map[string]*api.JobListStub{}
	for _, j := range c.obs.snapshot().jobs {
		if j.Meta[render.MetaFetch] == "true" {
			jobs[j.ID] = j
		}
	}
	models := map[string]int{}
	for i, m := range in.Catalog.Models {
		models[m.Name] = i
	}
	var errs []error
	for _, s := range spares {
		if s.Held {
			continue
		}
		id := render.FetchJobID(s.Key, s.Node)
		index := uint64(0)
		if j, ok := jobs[id]; ok {
			if j.Status != "dead" || in.Now.Sub(time.Unix(0, j.SubmitTime)) < spareRetry {
				continue // fetching, or ended lately: ask again later
			}
			index = j.JobModifyIndex
		}
		job, err := render.FetchJob(in.Catalog.Models[models[s.Model]], s.Node, c.writes.settings)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if index > 0 {
			// The same job again would not run again: a new version.
			job.Meta[render.MetaFetchAt] = in.Now.UTC().Format(time.RFC3339)
		}
		err = c.writes.register(ctx, fenced, job, index)
		if errors.Is(err, ErrNotLeading) {
			return err
		}
		if err != nil && !errors.Is(err, errConflict) {
			errs = append(errs, fmt.Errorf("warm spare of %s on %s: %w", s.Model, s.Node, err))
			continue
		}
		c.log.Info("warm spare: fetching", "model", s.Model, "node", s.Node, "job", id, "weights", s.Key)
	}
	return errors.Join(errs...)
}
