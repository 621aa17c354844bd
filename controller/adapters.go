package controller

import (
	"bytes"
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
// GET /lora-adapters, vLLM's and SGLang's GET /v1/models), and keeps each
// catalog adapter's state with the replica's engine reading: loaded only
// where the engine lists it. An adapter the engine does not list is an
// event on the replica ("not loaded", with why) and a warning in the log;
// one listed again later is a "loaded" event. A list that cannot be read
// leaves every adapter not loaded ("unverified: …") without an event.
//
// A replica rendered to get its adapters at runtime (render.MetaAdapters;
// engine.PlanAdapters: vLLM with one API server, SGLang with one HTTP
// worker and no plain data parallelism) starts with none: in the same
// round, once its list is read, the controller unloads what the engine
// lists that the catalog does not (or lists from another path: that one
// is loaded again from the catalog's, in place where the engine can, else
// unloaded and then loaded), loads each catalog adapter it does not list,
// and reads the list again, which alone says what is loaded. A load the engine refuses is a "load failed" event with
// the engine's answer, and is tried again after a back-off (30 s, doubling
// to 10 min; at once when the catalog's path changes). A round starts no
// load or unload after adapterOpsBudget on one replica: the rest wait for
// the next round.

// maxAdapterListBytes bounds an engine's adapter list (vLLM's cards of
// 4096 adapters are some hundreds of kilobytes).
const maxAdapterListBytes = 8 << 20

// maxAdapterEvents bounds the adapter events kept per replica.
const maxAdapterEvents = 32

// leftOutHint ends the note of an adapter the engine does not list.
const leftOutHint = " (the driver leaves out an adapter the engine could not load: the allocation's task events say why)"

// unverified prefixes the note of an adapter whose state is unknown.
const unverified = "unverified: "

// readAdapters sets m's adapter states from t's engine, after loading
// and unloading adapters where t gets them at runtime (ld holds what
// failed of that), and appends the events of what changed since m's last
// states.
func (c *Controller) readAdapters(ctx context.Context, client *http.Client, t engineTarget, m *controllerapi.EngineMetrics, ld *adapterLoads) {
	var states []controllerapi.AdapterState
	var err error
	var sync adapterSync
	if t.listing == nil {
		err = fmt.Errorf("llmgw reads no list of the adapters %s serves", t.engine)
	} else {
		var loaded []engine.LoadedAdapter
		if loaded, err = fetchAdapters(ctx, client, t.url, t.listing); err == nil && t.runtime != nil && ld != nil {
			if sync = c.syncAdapters(ctx, client, t, loaded, ld); sync.asked {
				m.AdapterEvents = append(m.AdapterEvents, sync.events...)
				// Verified afterwards: only the engine's list says
				// what it serves.
				loaded, err = fetchAdapters(ctx, client, t.url, t.listing)
			}
		}
		if err == nil {
			states = adapterStates(t, loaded, ld)
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
	now := time.Now()
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
		case !s.Loaded && (!wasKnownOut || s.Note != prev.Note && strings.HasPrefix(s.Note, loadFailed)):
			// Not loaded, or its load failed for another cause.
			ev = controllerapi.AdapterEvent{At: now, Adapter: s.Name, Event: "not loaded", Detail: s.Note}
			if strings.HasPrefix(s.Note, loadFailed) {
				ev.Event = "load failed"
			}
			c.log.Warn("LoRA adapter not loaded", "model", t.model, "replica", t.replica, "alloc", t.allocID, "adapter", s.Name, "why", s.Note)
		case s.Loaded && (wasKnownOut || sync.loaded[s.Name] != ""):
			ev = controllerapi.AdapterEvent{At: now, Adapter: s.Name, Event: "loaded", Detail: sync.loaded[s.Name]}
			c.log.Info("LoRA adapter loaded", "model", t.model, "replica", t.replica, "alloc", t.allocID, "adapter", s.Name, "how", ev.Detail)
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
// listed: by name where the engine names adapters (vLLM, SGLang), and then
// the path must be the catalog's; by path where it does not (llama.cpp,
// which numbers them: the ID). An adapter the nodes' stores fetch has the
// driver's link in the replica's task directory as its path
// (Adapter.EnginePath, gatewayapi.ListedAdapter.LoadedFrom). ld, where t
// gets its adapters at runtime, says why one the engine does not list is
// not loaded.
func adapterStates(t engineTarget, loaded []engine.LoadedAdapter, ld *adapterLoads) []controllerapi.AdapterState {
	out := make([]controllerapi.AdapterState, len(t.adapters))
	for i, a := range t.adapters {
		note := fmt.Sprintf("not in the engine's GET %s%s", t.listing.Path, leftOutHint)
		if t.runtime != nil {
			note = fmt.Sprintf("not in the engine's GET %s: the controller loads it (POST %s)", t.listing.Path, t.runtime.LoadPath)
			if f, ok := ld.failed[a.Name]; ok && f.path == a.Weights.Path {
				note = f.note
			}
		}
		st := controllerapi.AdapterState{Name: a.Name, Note: note}
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

// loadFailed starts the note of an adapter whose load the engine refused.
const loadFailed = "load failed: "

// The controller's loads and unloads on one replica in one round: none
// started after adapterOpsBudget, each within adapterOpTimeout (an engine
// reads the adapter's weights from its path before it answers).
const (
	adapterOpsBudget = 10 * time.Second
	adapterOpTimeout = time.Minute
)

// The back-off of an adapter whose load failed: adapterRetryFirst, doubling
// to adapterRetryMax.
const (
	adapterRetryFirst = 30 * time.Second
	adapterRetryMax   = 10 * time.Minute
)

// adapterLoads is what failed of the controller's loads and unloads on one
// replica, by adapter name; only the round that reads the replica uses it.
type adapterLoads struct {
	failed  map[string]adapterFailure // loads
	unloads map[string]adapterFailure
}

// adapterFailure is an operation the engine refused: the path it was for,
// the note saying why, how many times in a row, and when it may be tried
// again.
type adapterFailure struct {
	path  string
	note  string
	tries int
	next  time.Time
}

func (f adapterFailure) again(now time.Time, path, note string) adapterFailure {
	tries := 1
	if f.path == path {
		tries = f.tries + 1
	}
	wait := adapterRetryFirst << min(tries-1, 10)
	return adapterFailure{path: path, note: note, tries: tries, next: now.Add(min(wait, adapterRetryMax))}
}

// adapterSync is what one round's loads and unloads did: whether it asked
// the engine anything, the events of its unloads, and the adapters it
// loaded, each with the detail of its "loaded" event.
type adapterSync struct {
	asked  bool
	events []controllerapi.AdapterEvent
	loaded map[string]string
}

// syncAdapters makes t's engine serve the catalog's adapters, as far as
// the engine takes them: unloads first (what it lists that the catalog
// does not), then loads (what the catalog has that it does not list, or
// lists from another path: loaded in place, so that the name serves
// throughout, where the engine can, else unloaded first).
func (c *Controller) syncAdapters(ctx context.Context, client *http.Client, t engineTarget, loaded []engine.LoadedAdapter, ld *adapterLoads) adapterSync {
	if ld.failed == nil {
		ld.failed, ld.unloads = map[string]adapterFailure{}, map[string]adapterFailure{}
	}
	start := time.Now()
	want := map[string]bool{}
	for _, a := range t.adapters {
		want[a.Name] = true
	}
	listed := map[string]string{} // name -> path
	for _, l := range loaded {
		listed[l.Name] = l.Path
	}
	for name := range ld.failed {
		if !want[name] {
			delete(ld.failed, name)
		}
	}
	for name := range ld.unloads {
		if _, ok := listed[name]; !ok {
			delete(ld.unloads, name)
		}
	}
	out := adapterSync{loaded: map[string]string{}}
	spent := func() bool { return ctx.Err() != nil || time.Since(start) > adapterOpsBudget }
	log := c.log.With("model", t.model, "replica", t.replica, "alloc", t.allocID)
	rt := t.runtime

	for _, l := range loaded {
		if want[l.Name] || l.Name == "" {
			continue
		}
		if f, ok := ld.unloads[l.Name]; ok && time.Now().Before(f.next) || spent() {
			continue
		}
		out.asked = true
		err := adapterOp(ctx, client, t.url, rt.UnloadPath, rt.UnloadBody(l.Name), rt)
		if err != nil {
			note := err.Error()
			if f, ok := ld.unloads[l.Name]; !ok || f.note != note {
				out.events = append(out.events, controllerapi.AdapterEvent{At: time.Now(), Adapter: l.Name, Event: "unload failed", Detail: note})
				log.Warn("LoRA adapter not unloaded", "adapter", l.Name, "why", note)
			}
			ld.unloads[l.Name] = ld.unloads[l.Name].again(time.Now(), l.Path, note)
			continue
		}
		delete(ld.unloads, l.Name)
		out.events = append(out.events, controllerapi.AdapterEvent{At: time.Now(), Adapter: l.Name, Event: "unloaded",
			Detail: "not in the catalog (POST " + rt.UnloadPath + ")"})
		log.Info("LoRA adapter unloaded", "adapter", l.Name, "path", l.Path)
	}
	for _, a := range t.adapters {
		path, ok := listed[a.Name]
		if ok && path == a.Weights.Path {
			delete(ld.failed, a.Name)
			continue
		}
		if f, ok := ld.failed[a.Name]; ok && f.path == a.Weights.Path && time.Now().Before(f.next) || spent() {
			continue
		}
		out.asked = true
		var err error
		if ok && !rt.Inplace {
			// No load in place (SGLang's): the name is unserved
			// between the unload and the load.
			if err = adapterOp(ctx, client, t.url, rt.UnloadPath, rt.UnloadBody(a.Name), rt); err == nil {
				log.Info("LoRA adapter unloaded", "adapter", a.Name, "path", path, "why", "loaded again from the catalog's "+a.Weights.Path)
			}
		}
		if err == nil {
			err = adapterOp(ctx, client, t.url, rt.LoadPath, rt.LoadBody(a.Name, a.Weights.Path, ok), rt)
		}
		if err != nil {
			// The state's note says it: readAdapters' "load failed"
			// event.
			ld.failed[a.Name] = ld.failed[a.Name].again(time.Now(), a.Weights.Path, loadFailed+err.Error())
			continue
		}
		delete(ld.failed, a.Name)
		out.loaded[a.Name] = "POST " + rt.LoadPath
		switch {
		case ok && rt.Inplace:
			out.loaded[a.Name] += ", in place of " + path
		case ok:
			out.loaded[a.Name] = "POST " + rt.UnloadPath + " and " + rt.LoadPath + ", in place of " + path
		}
	}
	return out
}

// adapterOp POSTs body to t's engine at path; an answer other than 200 is
// an error saying the status and the engine's message.
func adapterOp(ctx context.Context, client *http.Client, url, path string, body []byte, rt *engine.AdapterRuntime) error {
	ctx, cancel := context.WithTimeout(ctx, adapterOpTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := bounded.ReadAll(resp.Body, 64<<10)
	if err != nil {
		return fmt.Errorf("POST %s: %s: %w", path, resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, oneLine(rt.Refusal(b)))
	}
	return nil
}
