package controller

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/enginemetrics"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/bounded"
)

// LoRA adapters on the replicas. With each engine scrape, the controller
// reads from a replica of a model with adapters which of them its engine
// serves, from the engine's own list (engine.AdapterListing: llama.cpp's
// GET /lora-adapters, vLLM's GET /v1/models), and keeps each catalog
// adapter's state with the replica's engine reading: loaded only where the
// engine lists it. An adapter the engine does not list is an event on the
// replica ("not loaded", with why) and a warning in the log; one listed
// again later is a "loaded" event. A list that cannot be read leaves every
// adapter not loaded ("unverified: …") without an event.

// maxAdapterListBytes bounds an engine's adapter list (vLLM's cards of
// 4096 adapters are some hundreds of kilobytes).
const maxAdapterListBytes = 8 << 20

// maxAdapterEvents bounds the adapter events kept per replica.
const maxAdapterEvents = 32

// leftOutHint ends the note of an adapter the engine does not list.
const leftOutHint = " (the driver leaves out an adapter the engine could not load: the allocation's task events say why)"

// unverified prefixes the note of an adapter whose state is unknown.
const unverified = "unverified: "

// readAdapters sets m's adapter states from t's engine, and appends the
// events of what changed since m's last states.
func (c *Controller) readAdapters(ctx context.Context, client *http.Client, t engineTarget, m *controllerapi.EngineMetrics) {
	now := time.Now()
	var states []controllerapi.AdapterState
	var err error
	if t.listing == nil {
		err = fmt.Errorf("llmgw reads no list of the adapters %s serves", t.engine)
	} else {
		var loaded []engine.LoadedAdapter
		if loaded, err = fetchAdapters(ctx, client, t.url, t.listing); err == nil {
			states = adapterStates(t, loaded)
		}
	}
	if err != nil {
		m.AdaptersError = oneLine(err.Error())
		states = make([]controllerapi.AdapterState, len(t.adapters))
		for i, a := range t.adapters {
			states[i] = controllerapi.AdapterState{Name: a.Name, Note: unverified + m.AdaptersError}
		}
	} else {
		m.AdaptersError = ""
	}
	before := map[string]controllerapi.AdapterState{}
	for _, s := range m.Adapters {
		before[s.Name] = s
	}
	for _, s := range states {
		if strings.HasPrefix(s.Note, unverified) {
			continue
		}
		prev, seen := before[s.Name]
		wasKnownOut := seen && !prev.Loaded && !strings.HasPrefix(prev.Note, unverified)
		var ev controllerapi.AdapterEvent
		switch {
		case !s.Loaded && !wasKnownOut:
			ev = controllerapi.AdapterEvent{At: now, Adapter: s.Name, Event: "not loaded", Detail: s.Note}
			c.log.Warn("LoRA adapter not loaded", "model", t.model, "replica", t.replica, "alloc", t.allocID, "adapter", s.Name, "why", s.Note)
		case s.Loaded && wasKnownOut:
			ev = controllerapi.AdapterEvent{At: now, Adapter: s.Name, Event: "loaded"}
			c.log.Info("LoRA adapter loaded", "model", t.model, "replica", t.replica, "alloc", t.allocID, "adapter", s.Name)
		default:
			continue
		}
		m.AdapterEvents = append(m.AdapterEvents, ev)
	}
	if n := len(m.AdapterEvents); n > maxAdapterEvents {
		m.AdapterEvents = slices.Clone(m.AdapterEvents[n-maxAdapterEvents:])
	}
	m.Adapters = states
}

// fetchAdapters reads the engine's list of the adapters it serves.
func fetchAdapters(ctx context.Context, client *http.Client, url string, l *engine.AdapterListing) ([]engine.LoadedAdapter, error) {
	ctx, cancel := context.WithTimeout(ctx, enginemetrics.DefaultTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+l.Path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := bounded.ReadAll(resp.Body, maxAdapterListBytes)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", l.Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", l.Path, resp.Status, oneLine(string(b[:min(len(b), 200)])))
	}
	return l.ParseLoadedAdapters(b)
}

// adapterStates matches the catalog's adapters of t with what its engine
// listed: by name where the engine names adapters (vLLM), and then the
// path must be the catalog's; by path where it does not (llama.cpp, which
// numbers them: the ID). An adapter the nodes' stores fetch has the
// driver's link in the replica's task directory as its path
// (Adapter.EnginePath, gatewayapi.ListedAdapter.LoadedFrom).
func adapterStates(t engineTarget, loaded []engine.LoadedAdapter) []controllerapi.AdapterState {
	out := make([]controllerapi.AdapterState, len(t.adapters))
	for i, a := range t.adapters {
		st := controllerapi.AdapterState{Name: a.Name, Note: fmt.Sprintf("not in the engine's GET %s%s", t.listing.Path, leftOutHint)}
		want := gatewayapi.ListedAdapter{Name: a.Name, Path: a.EnginePath()}
		for _, l := range loaded {
			switch {
			case l.Name != "" && l.Name == a.Name && !want.LoadedFrom(l.Path):
				st.Note = fmt.Sprintf("the engine serves %q from %s, not the catalog's %s", a.Name, l.Path, want.Path)
			case l.Name != "" && l.Name == a.Name, l.Name == "" && want.LoadedFrom(l.Path):
				st.Loaded, st.Note = true, ""
				if l.ID >= 0 {
					st.ID = new(l.ID)
				}
			default:
				continue
			}
			break
		}
		out[i] = st
	}
	return out
}
