package routing

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Routes of adapter requests (Adapters.Pick).
const (
	// RouteAdapter: the replica is in the adapter's home set.
	RouteAdapter = "adapter"
	// RouteAdapterFull: every replica's adapter slots were held by
	// adapters with requests in flight; the request went to the first
	// replica of the adapter's order within the load bound anyway, where
	// the engine queues it for a slot (vLLM's waiting_lora_adapters).
	RouteAdapterFull = "adapter-full"
	// RouteAdapterSpill: the first replica of the adapter's order was
	// over the load bound (Adapters.LoadFactor), and the request went to
	// the next within it.
	RouteAdapterSpill = "adapter-spill"
)

// Adapters routes the requests for a model's LoRA adapters among the base
// model's replicas: each adapter to a bounded home set of them.
//
//   - An adapter's order over the replicas is rendezvous hashing on its
//     name and each replica's address, the same for every gateway, and a
//     replica joining or leaving moves only the adapters it wins or held.
//   - Its home is the first replica of that order with room for it (it is
//     loaded there, a slot is free, or a slot holds an adapter with no
//     request in flight there, which is evicted), then, as its requests in
//     flight grow, k replicas in all, k = ⌈(in flight + 1) / PerReplica⌉,
//     taken in the same order among those with room for growth: growth
//     never evicts an adapter from the first replica of that adapter's
//     order (its own first home), so a cold adapter keeps its place
//     however hot the others run.
//   - The request goes to the home replica with the fewest requests in
//     flight per unit of weight (least-outstanding's measure).
//   - A replica holds at most Slots adapters as this router placed them
//     (the catalog's max_adapters: vLLM's --max-loras); when every slot of
//     every replica is held by adapters with requests in flight, the
//     request goes to its order's first replica within the load bound
//     (RouteAdapterFull) rather than waiting in the gateway.
//
// What a replica holds is the router's own account of where it sent each
// adapter, not the engine's: it is not verified against the engine here.
type Adapters struct {
	// Slots is how many adapters one replica holds at once; 0: no bound.
	Slots int
	// PerReplica is an adapter's requests in flight per replica of its
	// home before the home grows by one (at least 1).
	PerReplica int64
	// LoadFactor bounds a home replica's load, as the prefix policy's
	// does: a replica whose requests in flight (all adapters', all
	// gateways'), with this one, would pass LoadFactor times its weight's
	// share of the model's is passed over for the next of the adapter's
	// order (the home set is then taken from the replicas within the
	// bound): consistent hashing with bounded loads (Mirrokni, Thorup and
	// Zadimoghaddam, 2018), LoadFactor being their 1 + ε. 0: no bound.
	LoadFactor float64
	// Now is the clock the breakers read.
	Now func() time.Time

	mu sync.Mutex
	// inflight is each adapter's requests in flight, in all and by
	// replica.
	inflight map[string]*adapterLoad
	// loaded is the adapters each replica holds, least recently chosen
	// first.
	loaded map[*State][]string
}

type adapterLoad struct {
	total int64
	at    map[*State]int64
}

// Pick chooses the replica for a request to adapter among set's replicas,
// passing over those tried and those whose breaker refuses, counts the
// request in flight there (State.take) and for the adapter; Done ends it
// (with State.Release). ok is false when none can take the request.
func (a *Adapters) Pick(adapter string, set *Set, tried []*State) (Choice, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.Now()
	home, route := a.home(adapter, set, tried, now)
	firstHome := -1
	if len(home) > 0 {
		firstHome = home[0]
	}
	for len(home) > 0 {
		best := home[0]
		for _, i := range home[1:] {
			ri, rb := set.Replicas[i], set.Replicas[best]
			if better(ri.load(), int64(ri.Weight), rb.load(), int64(rb.Weight)) {
				best = i
			}
		}
		r := set.Replicas[best]
		if ok, probe := r.gate.Acquire(now); ok {
			r.take()
			a.place(adapter, r.State, set, best != firstHome)
			l := a.load(adapter)
			l.total++
			l.at[r.State]++
			return Choice{Index: best, Probe: probe, Route: route}, true
		}
		home = slices.DeleteFunc(home, func(i int) bool { return i == best })
	}
	return Choice{}, false
}

// Done ends a request to adapter on r that Pick chose: the adapter's count
// (the caller releases r's own with State.Release).
func (a *Adapters) Done(adapter string, r *State) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.inflight[adapter]
	if l == nil || l.at[r] == 0 {
		return
	}
	l.total--
	if l.at[r]--; l.at[r] == 0 {
		delete(l.at, r)
	}
	if l.total == 0 {
		delete(a.inflight, adapter)
	}
}

// Loaded returns the adapters r holds as this router placed them, least
// recently chosen first.
func (a *Adapters) Loaded(r *State) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.loaded[r])
}

// Home returns the indexes in set of adapter's home replicas now, in the
// adapter's order, and the route a request there would take.
func (a *Adapters) Home(adapter string, set *Set) ([]int, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.home(adapter, set, nil, a.Now())
}

func (a *Adapters) load(adapter string) *adapterLoad {
	if a.inflight == nil {
		a.inflight = map[string]*adapterLoad{}
	}
	l := a.inflight[adapter]
	if l == nil {
		l = &adapterLoad{at: map[*State]int64{}}
		a.inflight[adapter] = l
	}
	return l
}

// order is set's usable replicas (not tried, breaker letting a request
// through) in adapter's rendezvous order.
func order(adapter string, set *Set, tried []*State, now time.Time) []int {
	return orderOf(adapter, set, func(r Replica) bool { return usable(r, tried, now) })
}

// orderOf is set's replicas that keep takes, of weight above 0, in
// adapter's rendezvous order.
func orderOf(adapter string, set *Set, keep func(Replica) bool) []int {
	k := Key{Shared: xxhash.Sum64String(adapter), OK: true}
	uniform := true
	for _, r := range set.Replicas {
		uniform = uniform && r.Weight == set.Replicas[0].Weight
	}
	var idx []int
	ranks := make([]float64, len(set.Replicas))
	for i, r := range set.Replicas {
		if keep(r) && r.Weight > 0 {
			idx = append(idx, i)
			ranks[i] = rank(k, r, uniform)
		}
	}
	slices.SortStableFunc(idx, func(x, y int) int {
		switch {
		case ranks[x] > ranks[y]:
			return -1
		case ranks[x] < ranks[y]:
			return 1
		}
		return 0
	})
	return idx
}

// first is the first replica of adapter's order among all of set's
// replicas, whatever their breakers say (its own first home), or nil.
func first(adapter string, set *Set) *State {
	if o := orderOf(adapter, set, func(Replica) bool { return true }); len(o) > 0 {
		return set.Replicas[o[0]].State
	}
	return nil
}

// home is the adapter's home set: see Adapters.
func (a *Adapters) home(adapter string, set *Set, tried []*State, now time.Time) ([]int, string) {
	o := order(adapter, set, tried, now)
	if len(o) == 0 {
		return nil, RouteAdapter
	}
	per := max(a.PerReplica, 1)
	var total int64
	if l := a.inflight[adapter]; l != nil {
		total = l.total
	}
	k := int(min((total+per)/per, int64(len(o)))) // ⌈(total+1)/per⌉, at most the replicas
	within := a.withinBound(set, o)
	var home []int
	passed := false
	for _, i := range o {
		if len(home) == k {
			break
		}
		if !within(i) {
			passed = true
			continue
		}
		if a.room(adapter, set.Replicas[i].State, set, len(home) > 0) {
			home = append(home, i)
		}
	}
	if len(home) == 0 && passed {
		// Every replica with room is over the bound: as if there were
		// none.
		for _, i := range o {
			if len(home) == k {
				break
			}
			if a.room(adapter, set.Replicas[i].State, set, len(home) > 0) {
				home = append(home, i)
			}
		}
	}
	switch {
	case len(home) == 0:
		// No room anywhere: the first of the order within the bound, as
		// for any request (the first of all when none is within).
		for _, i := range o {
			if within(i) {
				return []int{i}, RouteAdapterFull
			}
		}
		return o[:1], RouteAdapterFull
	case passed && home[0] != o[0]:
		return home, RouteAdapterSpill
	}
	return home, RouteAdapter
}

// withinBound returns whether replica i of set (among the usable ones,
// o) is within LoadFactor times its weight's share of the requests in
// flight on them, this one counted (always, without a LoadFactor).
func (a *Adapters) withinBound(set *Set, o []int) func(i int) bool {
	if a.LoadFactor <= 0 {
		return func(int) bool { return true }
	}
	var total, weights int64
	for _, i := range o {
		total += set.Replicas[i].load()
		weights += int64(max(set.Replicas[i].Weight, 0))
	}
	return func(i int) bool {
		w := set.Replicas[i].Weight
		if w <= 0 || weights == 0 {
			return false
		}
		share := max(a.LoadFactor, 1) * float64(w) / float64(weights)
		return float64(set.Replicas[i].load()+1) <= math.Ceil(share*float64(total+1))
	}
}

// room reports whether r can hold adapter: it holds it already, or a slot
// is free, or one holds an adapter with no request in flight on r —
// for growth, one whose own first home r is not.
func (a *Adapters) room(adapter string, r *State, set *Set, growth bool) bool {
	held := a.loaded[r]
	if a.Slots <= 0 || len(held) < a.Slots || slices.Contains(held, adapter) {
		return true
	}
	return a.evictable(r, set, growth) >= 0
}

// evictable is the index in r's loaded list of the least recently chosen
// adapter with no request in flight on r (for growth: whose first home r
// is not), or -1.
func (a *Adapters) evictable(r *State, set *Set, growth bool) int {
	for i, b := range a.loaded[r] {
		if l := a.inflight[b]; l != nil && l.at[r] > 0 {
			continue
		}
		if growth && first(b, set) == r {
			continue
		}
		return i
	}
	return -1
}

// place records adapter as held by r, most recently chosen, evicting the
// adapter evictable says (growth: r is not the first of its home) when r's
// slots are full; none: r holds one more than its slots
// (RouteAdapterFull's case, or a home replica that filled meanwhile).
func (a *Adapters) place(adapter string, r *State, set *Set, growth bool) {
	if a.loaded == nil {
		a.loaded = map[*State][]string{}
	}
	held := a.loaded[r]
	if i := slices.Index(held, adapter); i >= 0 {
		a.loaded[r] = append(slices.Delete(held, i, i+1), adapter)
		return
	}
	if a.Slots > 0 && len(held) >= a.Slots {
		if i := a.evictable(r, set, growth); i >= 0 {
			held = slices.Delete(held, i, i+1)
		}
	}
	a.loaded[r] = append(held, adapter)
}
