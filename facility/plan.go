package facility

import (
	"cmp"
	"slices"
)

// Plan is what `llmgw plan` shows: where every replica of a catalog would go
// on an empty fleet, and the budgeted domains' draw after.
type Plan struct {
	Placements []Decision    // placed, in catalog order
	Unplaced   []Decision    // not placed, in catalog order
	Domains    []DomainUsage // budgeted domains, by level then value
	Holds      []Hold        // the facility's holds, as given
	Warnings   []string      // the catalog's (Catalog.Warnings)
}

// PlanCatalog places every replica of the catalog on the fleet, nothing
// running yet.
//
// Order: models by the size of their first profile (GPUs × nodes, largest
// first, so that multi-node replicas find whole nodes), models of one size
// in catalog order, and within a size round-robin by replica index (every
// model gets its replica 0 before any gets its replica 1). The output lists
// replicas in catalog order.
func PlanCatalog(fleet Fleet, fac Facility, cat Catalog) (Plan, error) {
	p, err := NewPlanner(fleet, fac, nil)
	if err != nil {
		return Plan{}, err
	}
	type job struct{ model, index int }
	models := make([]int, 0, len(cat.Models))
	for i := range cat.Models {
		models = append(models, i)
	}
	size := func(m Model) int {
		if len(m.Profiles) == 0 {
			return 0
		}
		return m.Profiles[0].GPUs * m.Profiles[0].Nodes
	}
	slices.SortStableFunc(models, func(a, b int) int { return cmp.Compare(size(cat.Models[b]), size(cat.Models[a])) })
	var order []job
	for i := 0; i < len(models); {
		j := i
		for j < len(models) && size(cat.Models[models[j]]) == size(cat.Models[models[i]]) {
			j++
		}
		for idx := 0; ; idx++ {
			more := false
			for _, m := range models[i:j] {
				if idx < cat.Models[m].Replicas {
					order = append(order, job{m, idx})
					more = true
				}
			}
			if !more {
				break
			}
		}
		i = j
	}
	decided := make([][]Decision, len(cat.Models))
	for i, m := range cat.Models {
		decided[i] = make([]Decision, m.Replicas)
	}
	for _, j := range order {
		m := cat.Models[j.model]
		d := p.Place(Request{Replica: ReplicaID(m.Name, j.index), Model: m})
		if d.Placed {
			if err := p.Commit(d); err != nil {
				return Plan{}, err
			}
		}
		decided[j.model][j.index] = d
	}
	var plan Plan
	for _, ds := range decided {
		for _, d := range ds {
			if d.Placed {
				plan.Placements = append(plan.Placements, d)
			} else {
				plan.Unplaced = append(plan.Unplaced, d)
			}
		}
	}
	plan.Domains = p.Budgeted()
	plan.Holds = fac.Holds
	plan.Warnings = cat.Warnings()
	return plan, nil
}
