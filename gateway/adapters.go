package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/gateway/routing"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/jsonscan"
)

// LoRA adapters. A model of the model list may list adapters
// (gatewayapi.ListedAdapter); a request names one as its model, by the
// adapter's name or as base:adapter. The gateway routes it among the base
// model's replicas by the adapter's home set (routing.Adapters) and writes
// the request the way the replica's engine (its engine= tag) names
// adapters:
//
//   - llama.cpp takes a per-request "lora" list of ids and scales; an
//     adapter the list leaves out has scale 0, and a request with no list
//     gets the global scales, which are every adapter at 1 at start
//     (tools/server/server-context.cpp construct_lora_list,
//     launch_slot_with_task at 80fb11a). So every request for a model with
//     adapters gets a list: the asked adapter at its scale, or for the base
//     model one adapter at scale 0. The ids are the replica's own, read from
//     its GET /lora-adapters by path (a replica that left an adapter out
//     numbers the rest without it, and one that does not list the asked
//     adapter is not sent the request).
//   - vLLM serves an adapter under its name (the name it was loaded
//     under, at start or at runtime): the request's model becomes the
//     adapter's name (it may have been base:adapter). SGLang takes
//     "served-name:adapter" as the model, split at the first ':'
//     (python/sglang/srt/entrypoints/openai/serving_base.py:40-71 at
//     v0.5.18, _parse_model_parameter and _resolve_lora_path). A replica
//     with no engine tag is written as vLLM.
//   - A replica is sent a request for an adapter only where its engine's
//     list holds it (loraTable: llama.cpp's ids, vLLM's and SGLang's
//     names; a replica with no engine tag is not read): vLLM's adapters
//     are loaded by the controller while the engine runs, so a replica
//     that started or restarted holds them only some seconds later. A list
//     that lacks the adapter is read again once it is loraStale old; a
//     vLLM replica that answers 404 "does not exist" for the adapter
//     anyway (its list was read before it restarted) is passed over like
//     one whose list lacks it (adapterGone).
//
// A client may not send its own "lora" for a model with adapters (400): the
// gateway decides which adapter answers, so that no request is answered by
// an adapter it did not ask for.

// adapterRef is an adapter a request names, and its base model.
type adapterRef struct {
	base string
	ad   gatewayapi.ListedAdapter
}

// allowedBy reports whether k may use what a request named as sent: ad,
// or the model when ad is nil. A key allows an adapter when its models
// name it as sent, by its name or as base:adapter; allowing the base model
// does not allow its adapters (a fine-tune may be one tenant's).
func (ad *adapterRef) allowedBy(k *Key, sent string) bool {
	if k.Allows(sent) {
		return true
	}
	return ad != nil && (k.Allows(ad.ad.Name) || k.Allows(ad.base+":"+ad.ad.Name))
}

// adapterPerReplica is an adapter's requests in flight per replica of its
// home set before the set grows by one replica (routing.Adapters.PerReplica).
const adapterPerReplica = 4

// adapterLoadFactor bounds the load of an adapter's home replicas
// (routing.Adapters.LoadFactor): a replica whose requests in flight would
// pass 1.25 times its share is passed over. Not the prefix policy's
// factor (2): over the few replicas of a model, twice the share let the
// hot adapter's first replica take half of all requests (docs/perf.md,
// "LoRA adapters (issue 37)").
const adapterLoadFactor = 1.25

// resolve says what a request's model names: a model (ad nil), or an
// adapter of base. A name that is neither is returned as the model, for
// the caller's 404.
func (t *table) resolve(name string) (base string, ad *adapterRef) {
	if t.models[name] != nil {
		return name, nil
	}
	if r, ok := t.adapters[name]; ok {
		return r.base, &r
	}
	if b, a, ok := strings.Cut(name, ":"); ok {
		if r, ok := t.adapters[a]; ok && r.base == b {
			return b, &r
		}
	}
	return name, nil
}

// adapterTables fills t.adapters and the adapter routers of t's models
// from the model list, keeping old's routers (what they counted in flight
// and placed) for the models that still have adapters.
func adapterTables(t, old *table, list gatewayapi.ModelList, perReplica int64, loadFactor float64, now func() time.Time) {
	for _, lm := range list.Models {
		if len(lm.Adapters) == 0 {
			continue
		}
		for _, a := range lm.Adapters {
			t.adapters[a.Name] = adapterRef{base: lm.Name, ad: a}
		}
		r := old.adapterRouters[lm.Name]
		if r == nil || r.Slots != lm.MaxAdapters {
			// A router's Slots is read under its lock: a new bound gets a
			// new router (what the old one placed is forgotten).
			r = &routing.Adapters{Slots: lm.MaxAdapters, PerReplica: perReplica, LoadFactor: loadFactor, Now: now}
		}
		t.adapterRouters[lm.Name] = r
	}
}

// errAdapterNotLoaded: the replica does not list the adapter the request
// asks for; another replica may.
var errAdapterNotLoaded = errors.New("adapter not loaded on the replica")

// loraTable is a replica's adapters as its engine lists them (its
// engine.AdapterListing): llama.cpp's GET /lora-adapters, their ids by
// path; vLLM's and SGLang's GET /v1/models, their names.
type loraTable struct {
	ids   map[string]int
	names map[string]bool
	// at is when it was read.
	at time.Time
}

// idOf is a's id on the replica: that of the one path the replica lists
// that is a's (its absolute path, or for an adapter the nodes' stores
// fetch, the driver's link under the replica's task directory:
// gatewayapi.ListedAdapter.LoadedFrom).
func (lt *loraTable) idOf(a gatewayapi.ListedAdapter) (int, bool) {
	if strings.HasPrefix(a.Path, "/") {
		id, ok := lt.ids[a.Path]
		return id, ok
	}
	id, n := 0, 0
	for p, i := range lt.ids {
		if a.LoadedFrom(p) {
			id, n = i, n+1
		}
	}
	return id, n == 1
}

// listsAdapters reports whether the gateway reads the adapters a replica
// of eng serves: llama.cpp's (their ids), vLLM's and SGLang's (whether it
// holds the one asked: vLLM's are loaded at runtime by the controller,
// so a replica that started, or restarted, does not hold them at once).
// A replica with no engine tag is not read.
func listsAdapters(eng string) bool {
	return eng == engine.LlamaCpp || eng == engine.VLLM || eng == engine.SGLang
}

// readLoras reads the list of the adapters ep's engine serves.
func (g *Gateway) readLoras(ctx context.Context, ep *endpoint) (*loraTable, error) {
	d, ok := engine.Lookup(ep.inst.Engine)
	if !ok || d.Adapters == nil || d.Adapters.Listed == nil {
		return nil, fmt.Errorf("engine %q: no adapter list to read", ep.inst.Engine)
	}
	l := d.Adapters.Listed
	ctx, cancel := context.WithTimeout(ctx, loraReadTimeout)
	defer cancel()
	at := g.now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.base+l.Path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := g.engineClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxLoraList+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", l.Path, resp.Status)
	}
	if len(body) > maxLoraList {
		return nil, fmt.Errorf("GET %s: over %d bytes", l.Path, maxLoraList)
	}
	list, err := l.ParseLoadedAdapters(body)
	if err != nil {
		return nil, err
	}
	lt := &loraTable{ids: map[string]int{}, names: map[string]bool{}, at: at}
	for _, a := range list {
		if a.ID >= 0 {
			lt.ids[a.Path] = a.ID
		}
		if a.Name != "" {
			lt.names[a.Name] = true
		}
	}
	return lt, nil
}

// How a replica's adapter list is read: within loraReadTimeout, at most
// maxLoraList bytes (a llama.cpp entry is about 100 bytes, a vLLM card
// some hundreds). One that lacks the adapter asked for is read again
// before the replica is passed over when it is older than loraStale.
const (
	loraReadTimeout = 5 * time.Second
	maxLoraList     = 8 << 20
	loraStale       = time.Second
)

// lorasOf is ep's adapter list: the one read last, else read now.
func (g *Gateway) lorasOf(ctx context.Context, ep *endpoint) (*loraTable, error) {
	if lt := ep.loras.Load(); lt != nil {
		return lt, nil
	}
	lt, err := g.readLoras(ctx, ep)
	if err != nil {
		return nil, err
	}
	ep.loras.Store(lt)
	return lt, nil
}

// holds reports whether ep's engine lists the adapter a request asks for,
// reading its list again when the one it has lacks it and is older than
// loraStale (the controller may have loaded the adapter since).
func (g *Gateway) holds(ctx context.Context, ep *endpoint, has func(*loraTable) bool) (*loraTable, error) {
	lt, err := g.lorasOf(ctx, ep)
	if err != nil {
		return nil, err
	}
	if has(lt) {
		return lt, nil
	}
	if g.now().Sub(lt.at) < loraStale {
		return nil, errAdapterNotLoaded
	}
	if lt, err = g.readLoras(ctx, ep); err != nil {
		return nil, err
	}
	ep.loras.Store(lt)
	if !has(lt) {
		return nil, errAdapterNotLoaded
	}
	return lt, nil
}

// loraList is the "lora" member llama.cpp gets: ad at its scale, or for
// the base model (ad nil) one adapter at scale 0; nil when the replica
// loaded no adapter and the request is the base model's.
func (lt *loraTable) loraList(ad *adapterRef) ([]byte, error) {
	if ad == nil {
		if len(lt.ids) == 0 {
			return nil, nil
		}
		id := -1
		for _, i := range lt.ids {
			if id < 0 || i < id {
				id = i
			}
		}
		return []byte(`"lora":[{"id":` + strconv.Itoa(id) + `,"scale":0}],`), nil
	}
	id, ok := lt.idOf(ad.ad)
	if !ok {
		return nil, errAdapterNotLoaded
	}
	return []byte(`"lora":[{"id":` + strconv.Itoa(id) + `,"scale":` + strconv.FormatFloat(ad.ad.Scale, 'g', -1, 64) + `}],`), nil
}

// bodyFor is the body the request is sent to ep with, when the gateway
// writes it for ep's engine (nil: the client's, as it is): see the top of
// this file.
func (x *exchange) bodyFor(ep *endpoint) ([]byte, error) {
	if !x.adapters {
		return nil, nil
	}
	body := x.body.bytes()
	if ep.inst.Engine == engine.LlamaCpp {
		lt, err := x.g.lorasOf(x.r.Context(), ep)
		if err == nil && x.adapter != nil {
			lt, err = x.g.holds(x.r.Context(), ep, func(lt *loraTable) bool { _, ok := lt.idOf(x.adapter.ad); return ok })
		}
		if errors.Is(err, errAdapterNotLoaded) {
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("reading its adapters: %w", err)
		}
		member, err := lt.loraList(x.adapter)
		if err != nil || member == nil {
			return nil, err
		}
		return withMember(body, member), nil
	}
	if x.adapter == nil {
		return nil, nil
	}
	if listsAdapters(ep.inst.Engine) {
		_, err := x.g.holds(x.r.Context(), ep, func(lt *loraTable) bool { return lt.names[x.adapter.ad.Name] })
		if errors.Is(err, errAdapterNotLoaded) {
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("reading its adapters: %w", err)
		}
	}
	want := x.adapter.ad.Name
	if ep.inst.Engine == engine.SGLang {
		want = x.adapter.base + ":" + want
	}
	if x.asked == want {
		return nil, nil
	}
	name, _ := json.Marshal(want)
	return withValue(body, "model", name), nil
}

// withMember returns the JSON object body with member (`"k":v,`) first.
func withMember(body, member []byte) []byte {
	i := bytes.IndexByte(body, '{')
	out := make([]byte, 0, len(body)+len(member))
	out = append(out, body[:i+1]...)
	out = append(out, member...)
	return append(out, body[i+1:]...)
}

// withValue returns the JSON object body (checked: jsonscan.Check) with
// its top-level member name's value replaced by val.
func withValue(body []byte, name string, val []byte) []byte {
	vs := jsonscan.Member(body, name)
	ve, err := jsonscan.SkipValue(body, vs)
	if vs < 0 || err != nil {
		return body
	}
	out := make([]byte, 0, len(body)+len(val))
	out = append(out, body[:vs]...)
	out = append(out, val...)
	return append(out, body[ve:]...)
}

// adapterGone reports whether resp is ep's vLLM engine saying it does not
// serve the adapter the request was written for: 404 "The model `NAME`
// does not exist." (vllm/entrypoints/serve/engine/serving.py:64, 197 at
// 53e211d). Then the response is discarded and ep's adapter list read
// again before its next request; otherwise resp is left as it was.
func (x *exchange) adapterGone(ep *endpoint, a *reply) bool {
	if x.adapter == nil || a.status() != http.StatusNotFound || ep.inst.Engine != engine.VLLM {
		return false
	}
	head, err := io.ReadAll(io.LimitReader(a.body, 4<<10))
	want := "The model `" + x.adapter.ad.Name + "` does not exist."
	if err != nil || !bytes.Contains(head, []byte(want)) {
		a.body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head), a.body), a.body}
		return false
	}
	a.discard()
	ep.loras.Store(nil)
	return true
}
