// Package store keeps the controller's durable state in Nomad Variables
// under llmgw/: holds set at run time (llmgw/holds), the replica counts
// pinned by operators over the autoscaler (llmgw/pins) and each replica's
// last placement decision with its rejections (llmgw/decisions/<replica>),
// so that holds, pins and explanations survive a controller restart. It
// also writes the catalog's model list for the gateways (llmgw/models, read
// by gateway.NomadModels) and the GPUs' power caps (llmgw/power-caps/<node>, and
// the heartbeat renewing their lease: devicesapi). Nothing else is stored: jobs and allocations are
// read from Nomad itself.
//
// Writes to the holds and the pins are check-and-set on the variable's
// modify index, so two controllers (or an operator's CLI racing the
// leader) never lose each other's holds or pins.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/devicesapi"
	"github.com/llmgw/llmgw/gatewayapi"
)

// Paths of the variables the controller owns.
const (
	Prefix        = "llmgw/"
	HoldsPath     = "llmgw/holds"
	PinsPath      = "llmgw/pins"
	DecisionsPath = "llmgw/decisions/"
	LeaderPath    = "llmgw/leader"
)

// Variables is the part of the Nomad API the store uses; *api.Variables
// implements it.
type Variables interface {
	Peek(path string, q *api.QueryOptions) (*api.Variable, *api.QueryMeta, error)
	CheckedCreate(v *api.Variable, q *api.WriteOptions) (*api.Variable, *api.WriteMeta, error)
	CheckedUpdate(v *api.Variable, q *api.WriteOptions) (*api.Variable, *api.WriteMeta, error)
	Update(v *api.Variable, q *api.WriteOptions) (*api.Variable, *api.WriteMeta, error)
	Delete(path string, q *api.WriteOptions) (*api.WriteMeta, error)
	PrefixList(prefix string, q *api.QueryOptions) ([]*api.VariableMetadata, *api.QueryMeta, error)
}

// Hold is a run-time hold on a domain.
type Hold struct {
	Domain string    `json:"domain"`
	Reason string    `json:"reason"`
	Drain  bool      `json:"drain"`
	SetAt  time.Time `json:"set_at"`
	SetBy  string    `json:"set_by,omitempty"`
}

// Store reads and writes the controller's variables in one namespace.
type Store struct {
	vars      Variables
	namespace string
}

// New returns a store over vars in namespace ("" is the client's default).
func New(vars Variables, namespace string) *Store { return &Store{vars: vars, namespace: namespace} }

// Timeout bounds every call the store makes to Nomad.
const Timeout = 10 * time.Second

// qo and wo bound one call by Timeout and by parent: the leader's own
// writes (decisions, the model list, power caps) pass a context that ends
// with its lease, so that a leader cut off from Nomad stops writing when
// it steps down instead of waiting out each call.
func (s *Store) qo(parent context.Context) (*api.QueryOptions, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(parent, Timeout)
	return (&api.QueryOptions{Namespace: s.namespace}).WithContext(ctx), cancel
}

func (s *Store) wo(parent context.Context) (*api.WriteOptions, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(parent, Timeout)
	return (&api.WriteOptions{Namespace: s.namespace}).WithContext(ctx), cancel
}

// ErrConflict is returned when a check-and-set write lost to another writer
// more times than it retries.
var ErrConflict = errors.New("variable changed concurrently")

// Holds returns the run-time holds, sorted by domain.
func (s *Store) Holds() ([]Hold, error) {
	hs, err := readList[Hold](s, HoldsPath, "holds")
	sort.SliceStable(hs, func(i, j int) bool { return hs[i].Domain < hs[j].Domain })
	return hs, err
}

// SetHold adds or replaces the hold on h.Domain.
func (s *Store) SetHold(h Hold) error {
	return updateList(s, HoldsPath, "holds", holdKey, func(hs []Hold) []Hold {
		return append(slices.DeleteFunc(hs, func(x Hold) bool { return x.Domain == h.Domain }), h)
	})
}

// ReleaseHold removes the hold on domain; it reports whether there was one.
func (s *Store) ReleaseHold(domain string) (bool, error) {
	found := false
	err := updateList(s, HoldsPath, "holds", holdKey, func(hs []Hold) []Hold {
		return slices.DeleteFunc(hs, func(x Hold) bool {
			found = found || x.Domain == domain
			return x.Domain == domain
		})
	})
	return found, err
}

func holdKey(h Hold) string { return h.Domain }

// Pins returns the pins, expired ones included, sorted by model.
func (s *Store) Pins() ([]controllerapi.Pin, error) {
	ps, err := readList[controllerapi.Pin](s, PinsPath, "pins")
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Model < ps[j].Model })
	return ps, err
}

// SetPin adds or replaces the pin of p.Model.
func (s *Store) SetPin(p controllerapi.Pin) error {
	return updateList(s, PinsPath, "pins", pinKey, func(ps []controllerapi.Pin) []controllerapi.Pin {
		return append(slices.DeleteFunc(ps, func(x controllerapi.Pin) bool { return x.Model == p.Model }), p)
	})
}

// ReleasePin removes the pin of model; it reports whether there was one.
func (s *Store) ReleasePin(model string) (bool, error) {
	found := false
	err := updateList(s, PinsPath, "pins", pinKey, func(ps []controllerapi.Pin) []controllerapi.Pin {
		return slices.DeleteFunc(ps, func(x controllerapi.Pin) bool {
			found = found || x.Model == model
			return x.Model == model
		})
	})
	return found, err
}

// DropExpiredPins removes the pins that have expired at now, and returns
// them; it writes nothing when none has.
func (s *Store) DropExpiredPins(now time.Time) ([]controllerapi.Pin, error) {
	ps, err := s.Pins()
	if err != nil || !slices.ContainsFunc(ps, func(p controllerapi.Pin) bool { return !p.Active(now) }) {
		return nil, err
	}
	var gone []controllerapi.Pin
	err = updateList(s, PinsPath, "pins", pinKey, func(ps []controllerapi.Pin) []controllerapi.Pin {
		gone = gone[:0]
		return slices.DeleteFunc(ps, func(p controllerapi.Pin) bool {
			if !p.Active(now) {
				gone = append(gone, p)
				return true
			}
			return false
		})
	})
	return gone, err
}

func pinKey(p controllerapi.Pin) string { return p.Model }

// readList reads the JSON list in item of the variable at path, sorted by
// its key; nil when the variable does not exist.
func readList[T any](s *Store, path, item string) ([]T, error) {
	v, err := s.peek(path)
	if err != nil || v == nil {
		return nil, err
	}
	return decodeList[T](v, path, item)
}

func decodeList[T any](v *api.Variable, path, item string) ([]T, error) {
	raw := v.Items[item]
	if raw == "" {
		return nil, nil
	}
	var out []T
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, fmt.Errorf("variable %s: %w", path, err)
	}
	return out, nil
}

// updateList applies f to the list in item of the variable at path with
// check-and-set, retrying a few times when another writer got there first.
// The list is written sorted by key.
func updateList[T any](s *Store, path, item string, key func(T) string, f func([]T) []T) error {
	for attempt := 0; attempt < 5; attempt++ {
		v, err := s.peek(path)
		if err != nil {
			return err
		}
		var list []T
		if v != nil {
			if list, err = decodeList[T](v, path, item); err != nil {
				return err
			}
		}
		list = f(list)
		sort.SliceStable(list, func(i, j int) bool { return key(list[i]) < key(list[j]) })
		if list == nil {
			list = []T{}
		}
		data, err := json.Marshal(list)
		if err != nil {
			return err
		}
		nv := &api.Variable{Namespace: s.namespace, Path: path, Items: api.VariableItems{item: string(data)}}
		if v == nil {
			wo, cancel := s.wo(context.Background())
			_, _, err = s.vars.CheckedCreate(nv, wo)
			cancel()
		} else {
			nv.ModifyIndex = v.ModifyIndex
			wo, cancel := s.wo(context.Background())
			_, _, err = s.vars.CheckedUpdate(nv, wo)
			cancel()
		}
		var cas api.ErrCASConflict
		if errors.As(err, &cas) {
			continue
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		return nil
	}
	return fmt.Errorf("write %s: %w", path, ErrConflict)
}

// SaveDecision stores a replica's explanation (any JSON-encodable value).
// The latest pass's decision wins; it is not check-and-set.
func (s *Store) SaveDecision(ctx context.Context, replica string, decision any) error {
	data, err := json.Marshal(decision)
	if err != nil {
		return err
	}
	wo, cancel := s.wo(ctx)
	defer cancel()
	_, _, err = s.vars.Update(&api.Variable{Namespace: s.namespace, Path: DecisionPath(replica), Items: api.VariableItems{"decision": string(data)}}, wo)
	if err != nil {
		return fmt.Errorf("write decision of %s: %w", replica, err)
	}
	return nil
}

// SaveModels writes the gateways' model list (gatewayapi.ModelList.Items).
// The latest write wins; it is not check-and-set.
func (s *Store) SaveModels(ctx context.Context, items map[string]string) error {
	wo, cancel := s.wo(ctx)
	defer cancel()
	if _, _, err := s.vars.Update(&api.Variable{Namespace: s.namespace, Path: gatewayapi.ModelsVariable, Items: items}, wo); err != nil {
		return fmt.Errorf("write %s: %w", gatewayapi.ModelsVariable, err)
	}
	return nil
}

// Decision loads a replica's stored explanation into out; ok is false when
// none is stored.
func (s *Store) Decision(replica string, out any) (bool, error) {
	v, err := s.peek(DecisionPath(replica))
	if err != nil || v == nil {
		return false, err
	}
	if err := json.Unmarshal([]byte(v.Items["decision"]), out); err != nil {
		return false, fmt.Errorf("variable %s: %w", DecisionPath(replica), err)
	}
	return true, nil
}

// PruneDecisions deletes the stored explanations of every replica not in
// keep (their slots left the catalog) and returns how many it deleted.
func (s *Store) PruneDecisions(ctx context.Context, keep []string) (int, error) {
	want := make(map[string]bool, len(keep))
	for _, r := range keep {
		want[DecisionPath(r)] = true
	}
	qo, cancel := s.qo(ctx)
	vs, _, err := s.vars.PrefixList(DecisionsPath, qo)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", DecisionsPath, err)
	}
	n := 0
	var errs []error
	for _, v := range vs {
		if want[v.Path] || !strings.HasPrefix(v.Path, DecisionsPath) {
			continue
		}
		wo, cancel := s.wo(ctx)
		_, err := s.vars.Delete(v.Path, wo)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", v.Path, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

func (s *Store) peek(path string) (*api.Variable, error) {
	qo, cancel := s.qo(context.Background())
	defer cancel()
	v, _, err := s.vars.Peek(path, qo)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return v, nil
}

// DecisionPath is the variable of a replica's decision, the replica id
// escaped as Nomad variable paths need (devicesapi.EscapePath: the dots of
// "llama-3.1-70b-0" are written ~2e).
func DecisionPath(replica string) string { return DecisionsPath + devicesapi.EscapePath(replica) }

// SetNodeCaps writes the power caps of the node named node
// (devicesapi.NodeCapsPath): each GPU's cap and its fallback for when the
// node loses the controller, in watts by GPU UUID. A GPU in neither map
// runs at its default limit. The variable always holds
// devicesapi.ManagedItem too: a node with neither caps nor fallbacks is
// still managed (its plugin applies its own fallback_watts when the lease
// ends), and Nomad refuses a variable without items. A share (Watts > 0)
// makes the variable format 2: the node's share and each GPU's floor and
// priority, beside the same caps and fallbacks (devicesapi.FormatItem).
// The latest write wins; only the leader writes.
func (s *Store) SetNodeCaps(ctx context.Context, node string, caps, fallback map[string]float64, share devicesapi.NodeShare) error {
	items := api.VariableItems{devicesapi.ManagedItem: "true"}
	for uuid, w := range caps {
		items[devicesapi.CapItem+uuid] = strconv.FormatFloat(w, 'f', -1, 64)
	}
	for uuid, w := range fallback {
		items[devicesapi.FallbackItem+uuid] = strconv.FormatFloat(w, 'f', -1, 64)
	}
	if share.Watts > 0 {
		items[devicesapi.FormatItem] = devicesapi.Format
		items[devicesapi.ShareItem] = strconv.FormatFloat(share.Watts, 'f', -1, 64)
		for uuid, g := range share.GPUs {
			if g.Floor > 0 {
				items[devicesapi.FloorItem+uuid] = strconv.FormatFloat(g.Floor, 'f', -1, 64)
			}
			items[devicesapi.PriorityItem+uuid] = strconv.Itoa(g.Priority)
		}
	}
	path := devicesapi.NodeCapsPath(devicesapi.PowerCapsPrefix, node)
	wo, cancel := s.wo(ctx)
	defer cancel()
	if _, _, err := s.vars.Update(&api.Variable{Namespace: s.namespace, Path: path, Items: items}, wo); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// CappedNodes lists the variables of the nodes whose power the controller
// manages, as paths (devicesapi.NodeCapsPath), the heartbeat left out.
func (s *Store) CappedNodes(ctx context.Context) ([]string, error) {
	qo, cancel := s.qo(ctx)
	vs, _, err := s.vars.PrefixList(devicesapi.PowerCapsPrefix+"/", qo)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", devicesapi.PowerCapsPrefix, err)
	}
	var out []string
	for _, v := range vs {
		if v.Path != devicesapi.PowerCapsPrefix+"/"+devicesapi.Heartbeat {
			out = append(out, v.Path)
		}
	}
	sort.Strings(out)
	return out, nil
}

// DeletePath deletes one variable the controller owns, by path. Deleting
// a node's caps (a path CappedNodes lists) stops managing its power: its
// device plugin puts every GPU llmgw capped back to its default limit.
func (s *Store) DeletePath(ctx context.Context, path string) error {
	wo, cancel := s.wo(ctx)
	defer cancel()
	if _, err := s.vars.Delete(path, wo); err != nil {
		return fmt.Errorf("delete %s: %w", path, err)
	}
	return nil
}

// Heartbeat renews the lease of every node's caps: each write is a new
// version of the heartbeat variable, and a node whose plugin sees none for
// lease applies its fallback caps. beat is written as an item so that each
// write differs (the controller's pass count, say).
func (s *Store) Heartbeat(ctx context.Context, lease time.Duration, beat uint64) error {
	path := devicesapi.PowerCapsPrefix + "/" + devicesapi.Heartbeat
	wo, cancel := s.wo(ctx)
	defer cancel()
	items := api.VariableItems{devicesapi.LeaseItem: lease.String(), "beat": strconv.FormatUint(beat, 10)}
	if _, _, err := s.vars.Update(&api.Variable{Namespace: s.namespace, Path: path, Items: items}, wo); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
