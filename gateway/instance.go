package gateway

import (
	"cmp"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/llmgw/llmgw/gatewayapi"
)

// Instance is one healthy replica a discovery source found.
type Instance struct {
	// ID identifies the registration: Consul's node and service ID, or
	// Nomad's service registration ID.
	ID      string
	Model   string
	Profile string
	Replica string
	// Address is host:port.
	Address string
	// Weight is the replica's share of traffic against the model's other
	// replicas: a weight=<n> tag, else the registry's weight, else 1. A
	// weight of 0 gets traffic only when no other replica can take it.
	Weight int
	// Engine is the replica's engine, from its engine=<name> tag ("" when
	// untagged): how a request for a LoRA adapter is written for it.
	Engine string
}

// Snapshot is what a discovery source knows at one moment.
type Snapshot struct {
	// Models is every model with a replica service in the catalog, healthy
	// or not: a request for one of these with no healthy replica is 503,
	// for any other model 404.
	Models []string
	// Instances are the healthy replicas.
	Instances []Instance
}

// normalize sorts and de-duplicates, and adds the instances' models to
// Models.
func (s Snapshot) normalize() Snapshot {
	models := slices.Clone(s.Models)
	for _, in := range s.Instances {
		models = append(models, in.Model)
	}
	slices.Sort(models)
	insts := slices.Clone(s.Instances)
	slices.SortFunc(insts, func(a, b Instance) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.ID, b.ID))
	})
	return Snapshot{Models: slices.Compact(models), Instances: insts}
}

// instanceFromTags builds an instance from a registration's tags; ok is
// false when the tags do not mark a replica service (no llmgw tag or no
// model).
func instanceFromTags(id, host string, port int, tags []string, registryWeight int) (Instance, bool) {
	in := Instance{ID: id, Address: net.JoinHostPort(host, strconv.Itoa(port)), Weight: 1}
	if registryWeight > 0 {
		in.Weight = registryWeight
	}
	marked := false
	for _, t := range tags {
		switch {
		case t == gatewayapi.ServiceTag:
			marked = true
		case strings.HasPrefix(t, gatewayapi.TagModel):
			in.Model = t[len(gatewayapi.TagModel):]
		case strings.HasPrefix(t, gatewayapi.TagProfile):
			in.Profile = t[len(gatewayapi.TagProfile):]
		case strings.HasPrefix(t, gatewayapi.TagReplica):
			in.Replica = t[len(gatewayapi.TagReplica):]
		case strings.HasPrefix(t, gatewayapi.TagEngine):
			in.Engine = t[len(gatewayapi.TagEngine):]
		case strings.HasPrefix(t, gatewayapi.TagWeight):
			if w, err := strconv.Atoi(t[len(gatewayapi.TagWeight):]); err == nil && w >= 0 {
				in.Weight = w
			}
		}
	}
	if !marked || in.Model == "" || host == "" || port <= 0 {
		return Instance{}, false
	}
	return in, true
}

// modelsFromTags returns the models named by model=<m> tags in a catalog
// entry marked with the llmgw tag.
func modelsFromTags(tags []string) []string {
	if !slices.Contains(tags, gatewayapi.ServiceTag) {
		return nil
	}
	var out []string
	for _, t := range tags {
		if m, ok := strings.CutPrefix(t, gatewayapi.TagModel); ok && m != "" {
			out = append(out, m)
		}
	}
	return out
}
