package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/gateway/routing"
	"github.com/llmgw/llmgw/gatewayapi"
)

// bodyRecorder is a replica that answers every completion 200 and keeps
// the bodies it was sent; as llama.cpp it lists the adapters of loras at
// GET /lora-adapters, in that order, and as vLLM and SGLang those of
// cards (names; all of loras' file names without .gguf when nil) at GET
// /v1/models.
type bodyRecorder struct {
	srv   *httptest.Server
	mu    sync.Mutex
	seen  []string
	loras []string
	cards []string
	// lists counts the reads of its adapter lists.
	lists int
}

func startBodyRecorder(t *testing.T, loras ...string) *bodyRecorder {
	t.Helper()
	br := &bodyRecorder{loras: loras}
	br.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		br.mu.Lock()
		defer br.mu.Unlock()
		switch r.URL.Path {
		case "/lora-adapters":
			br.lists++
			list := []map[string]any{}
			for i, p := range br.loras {
				list = append(list, map[string]any{"id": i, "path": p, "scale": 1})
			}
			_ = json.NewEncoder(w).Encode(list)
			return
		case "/v1/models":
			br.lists++
			cards := br.cards
			if cards == nil {
				for _, p := range br.loras {
					cards = append(cards, strings.TrimSuffix(path.Base(p), ".gguf"))
				}
			}
			list := []map[string]any{{"id": "base", "root": "/models/base", "parent": nil}}
			for _, c := range cards {
				list = append(list, map[string]any{"id": c, "root": "/lora/" + c, "parent": "base"})
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": list})
			return
		}
		b, _ := io.ReadAll(r.Body)
		br.seen = append(br.seen, string(b))
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	}))
	t.Cleanup(br.srv.Close)
	return br
}

func (br *bodyRecorder) last(t *testing.T) map[string]any {
	t.Helper()
	br.mu.Lock()
	defer br.mu.Unlock()
	if len(br.seen) == 0 {
		t.Fatal("the replica was sent nothing")
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(br.seen[len(br.seen)-1]), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func (br *bodyRecorder) instance(id, eng string) Instance {
	return Instance{ID: id, Model: "base", Replica: id, Address: strings.TrimPrefix(br.srv.URL, "http://"), Weight: 1, Engine: eng}
}

var adapterList = gatewayapi.ModelList{Models: []gatewayapi.ListedModel{{Name: "base", Replicas: 1, Min: 1, Adapters: []gatewayapi.ListedAdapter{
	{Name: "sql", Path: "/lora/sql.gguf", Scale: 0.5}, {Name: "chat", Path: "/lora/chat.gguf", Scale: 1},
}}}}

// What each engine is sent: vLLM the adapter's name as the model, the
// client's body otherwise untouched; llama.cpp a "lora" list with the
// replica's own id for the adapter at its scale, or scale 0 for the base
// model, the client's model left as sent.
func TestAdapterRequestsWrittenPerEngine(t *testing.T) {
	for _, tc := range []struct {
		engine, model string
		wantModel     string
		wantLora      string // JSON of the lora member; "" none
	}{
		{engine.VLLM, "sql", "sql", ""},
		{engine.VLLM, "base:sql", "sql", ""},
		{engine.VLLM, "base", "base", ""},
		{engine.SGLang, "sql", "base:sql", ""},
		{engine.SGLang, "base:sql", "base:sql", ""},
		{engine.LlamaCpp, "sql", "sql", `[{"id":1,"scale":0.5}]`},
		{engine.LlamaCpp, "base:chat", "base:chat", `[{"id":0,"scale":1}]`},
		{engine.LlamaCpp, "base", "base", `[{"id":0,"scale":0}]`},
	} {
		t.Run(tc.engine+" "+tc.model, func(t *testing.T) {
			// The llama.cpp replica loaded chat first: ids are its own.
			br := startBodyRecorder(t, "/lora/chat.gguf", "/lora/sql.gguf")
			tg := startGateway(t, Options{}, br.instance("r", tc.engine))
			tg.UpdateModels(adapterList, nil)
			ans := tg.post(t, "/v1/completions", `{"model":"`+tc.model+`","prompt":"hi","max_tokens":4}`)
			if ans.status != 200 {
				t.Fatalf("%d %s", ans.status, ans.body)
			}
			v := br.last(t)
			if v["model"] != tc.wantModel || v["prompt"] != "hi" || v["max_tokens"] != 4.0 {
				t.Errorf("sent %v, want model %q and the rest as the client wrote it", v, tc.wantModel)
			}
			lora, _ := json.Marshal(v["lora"])
			if tc.wantLora == "" && v["lora"] != nil || tc.wantLora != "" && string(lora) != tc.wantLora {
				t.Errorf("sent lora %s, want %q", lora, tc.wantLora)
			}
		})
	}
}

// A replica that does not list the asked adapter (llama.cpp's GET
// /lora-adapters; vLLM's and SGLang's GET /v1/models, where the
// controller loads adapters while the engine runs) is not sent the
// request: another is, and with none the answer is a 503 naming why.
func TestAdapterNotLoadedPassedOver(t *testing.T) {
	for _, eng := range []string{engine.LlamaCpp, engine.VLLM, engine.SGLang} {
		t.Run(eng, func(t *testing.T) {
			without := startBodyRecorder(t, "/lora/chat.gguf")
			with := startBodyRecorder(t, "/lora/chat.gguf", "/lora/sql.gguf")
			tg := startGateway(t, Options{}, without.instance("without", eng), with.instance("with", eng))
			tg.UpdateModels(adapterList, nil)
			for range 6 {
				if ans := tg.post(t, "/v1/completions", `{"model":"sql","prompt":"hi"}`); ans.status != 200 || ans.header.Get(ReplicaHeader) != "with" {
					t.Fatalf("sql: %d from %q: %s", ans.status, ans.header.Get(ReplicaHeader), ans.body)
				}
			}
			if n := len(without.seen); n != 0 {
				t.Errorf("the replica without sql was sent %d requests", n)
			}

			tg = startGateway(t, Options{}, without.instance("without", eng))
			tg.UpdateModels(adapterList, nil)
			ans := tg.post(t, "/v1/completions", `{"model":"sql","prompt":"hi"}`)
			if ans.status != 503 || !strings.Contains(string(ans.body), "adapter not loaded") {
				t.Errorf("sql with no replica serving it: %d %s, want 503 saying the adapter is not loaded", ans.status, ans.body)
			}
		})
	}
}

// An adapter a replica's list lacked is looked for again once the list is
// older than loraStale (the controller loads vLLM's adapters while the
// engine runs), not before.
func TestAdapterListReadAgain(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	br := startBodyRecorder(t)
	br.cards = []string{"chat"}
	tg := startGateway(t, Options{Now: clock}, br.instance("r", engine.VLLM))
	tg.UpdateModels(adapterList, nil)
	if ans := tg.post(t, "/v1/completions", `{"model":"sql","prompt":"hi"}`); ans.status != 503 {
		t.Fatalf("sql before it is loaded: %d %s", ans.status, ans.body)
	}
	br.mu.Lock()
	br.cards = []string{"chat", "sql"}
	reads := br.lists
	br.mu.Unlock()
	if ans := tg.post(t, "/v1/completions", `{"model":"sql","prompt":"hi"}`); ans.status != 503 {
		t.Errorf("sql within loraStale of the last read: %d %s, want 503", ans.status, ans.body)
	}
	mu.Lock()
	now = now.Add(loraStale + time.Millisecond)
	mu.Unlock()
	if ans := tg.post(t, "/v1/completions", `{"model":"sql","prompt":"hi"}`); ans.status != 200 {
		t.Errorf("sql once loaded, the list stale: %d %s", ans.status, ans.body)
	}
	br.mu.Lock()
	defer br.mu.Unlock()
	if br.lists != reads+1 {
		t.Errorf("%d reads of the list after the first %d, want one more", br.lists, reads)
	}
}

// A vLLM replica that answers 404 "The model `NAME` does not exist." for
// the adapter its list held (it restarted, and the controller has not
// loaded it again yet) is passed over for another, and its list is read
// again; any other 404 is the client's answer.
func TestAdapterGoneFromVLLM(t *testing.T) {
	var gone sync.Map // replica -> answer
	replica := func(name string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/models" {
				_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"base","root":"/m"},{"id":"sql","root":"/lora/sql","parent":"base"}]}`)
				return
			}
			if a, ok := gone.Load(name); ok {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, a.(string))
				return
			}
			_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := replica("a"), replica("b")
	inst := func(id string, srv *httptest.Server) Instance {
		return Instance{ID: id, Model: "base", Replica: id, Address: strings.TrimPrefix(srv.URL, "http://"), Weight: 1, Engine: engine.VLLM}
	}
	tg := startGateway(t, Options{}, inst("a", a), inst("b", b))
	tg.UpdateModels(adapterList, nil)
	// Whichever sql's home set picks first serves it; then it restarts.
	ans := tg.post(t, "/v1/completions", `{"model":"sql","prompt":"hi"}`)
	first := ans.header.Get(ReplicaHeader)
	if ans.status != 200 || first == "" {
		t.Fatalf("sql: %d %s", ans.status, ans.body)
	}
	other := map[string]string{"a": "b", "b": "a"}[first]
	gone.Store(first, `{"error":{"message":"The model `+"`sql`"+` does not exist.","type":"NotFoundError","param":"model","code":404}}`)
	ans = tg.post(t, "/v1/completions", `{"model":"sql","prompt":"hi"}`)
	if ans.status != 200 || ans.header.Get(ReplicaHeader) != other {
		t.Errorf("sql after %s lost it: %d from %q: %s, want 200 from %s", first, ans.status, ans.header.Get(ReplicaHeader), ans.body, other)
	}
	// Another 404 is passed on as it is.
	gone.Store(first, `{"error":{"message":"Not this one.","type":"NotFoundError","param":null,"code":404}}`)
	gone.Store(other, `{"error":{"message":"Not this one.","type":"NotFoundError","param":null,"code":404}}`)
	ans = tg.post(t, "/v1/completions", `{"model":"sql","prompt":"hi"}`)
	if ans.status != 404 || !strings.Contains(string(ans.body), "Not this one.") {
		t.Errorf("another 404: %d %s, want it passed on", ans.status, ans.body)
	}
}

// An adapter the nodes' stores fetch is listed with the driver's link,
// relative to the replica's task directory: a llama.cpp replica lists it
// under its own task directory, and the gateway finds its id there; a
// replica whose list lacks it (the store could not fetch it) is passed
// over.
func TestFetchedAdapterFoundUnderTheTaskDirectory(t *testing.T) {
	list := gatewayapi.ModelList{Models: []gatewayapi.ListedModel{{Name: "base", Replicas: 1, Min: 1, Adapters: []gatewayapi.ListedAdapter{
		{Name: "sql", Path: "llmgw-adapters/sql", Scale: 1}, {Name: "chat", Path: "/lora/chat.gguf", Scale: 1},
	}}}}
	with := startBodyRecorder(t, "/lora/chat.gguf", "/nomad/alloc/a1/engine/llmgw-adapters/sql")
	without := startBodyRecorder(t, "/lora/chat.gguf", "/nomad/alloc/a2/engine/llmgw-adapters/sql2")
	tg := startGateway(t, Options{}, without.instance("without", engine.LlamaCpp), with.instance("with", engine.LlamaCpp))
	tg.UpdateModels(list, nil)
	for range 4 {
		ans := tg.post(t, "/v1/completions", `{"model":"sql","prompt":"hi"}`)
		if ans.status != 200 || ans.header.Get(ReplicaHeader) != "with" {
			t.Fatalf("sql: %d from %q: %s", ans.status, ans.header.Get(ReplicaHeader), ans.body)
		}
		if lora, _ := json.Marshal(with.last(t)["lora"]); string(lora) != `[{"id":1,"scale":1}]` {
			t.Errorf("sent lora %s, want sql's id on the replica, 1", lora)
		}
	}
	if n := len(without.seen); n != 0 {
		t.Errorf("the replica without sql was sent %d requests", n)
	}
}

// Keys: an adapter is allowed when the key names it (as requested, by its
// name or as base:adapter), not because it allows the base model;
// /v1/models lists for each key what it may use.
func TestAdapterKeys(t *testing.T) {
	br := startBodyRecorder(t, "/lora/sql.gguf", "/lora/chat.gguf")
	tg := startKeyGateway(t, keyBlock("base-only", "sk-base", "  models = [\"base\"]\n")+
		keyBlock("sql", "sk-sql", "  models = [\"sql\"]\n")+keyBlock("chat", "sk-chat", "  models = [\"base:chat\"]\n"),
		Options{}, br.instance("r", engine.VLLM))
	tg.UpdateModels(adapterList, nil)
	for _, tc := range []struct {
		key, model string
		status     int
	}{
		{"sk-base", "base", 200}, {"sk-base", "sql", 403}, {"sk-base", "base:sql", 403},
		{"sk-sql", "sql", 200}, {"sk-sql", "base:sql", 200}, {"sk-sql", "base", 403}, {"sk-sql", "chat", 403},
		{"sk-chat", "chat", 200}, {"sk-chat", "base:chat", 200}, {"sk-chat", "sql", 403},
	} {
		if got := tg.do(t, http.MethodPost, "/v1/completions", tc.key, `{"model":"`+tc.model+`","prompt":"hi"}`); got.status != tc.status {
			t.Errorf("%s asking for %s: %d, want %d: %s", tc.key, tc.model, got.status, tc.status, got.body)
		}
	}
	for key, want := range map[string][]string{"sk-base": {"base"}, "sk-sql": {"sql"}, "sk-chat": {"chat"}} {
		got := tg.do(t, http.MethodGet, "/v1/models", key, "")
		var list struct {
			Data []modelCard `json:"data"`
		}
		if err := json.Unmarshal(got.body, &list); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range list.Data {
			ids = append(ids, c.ID)
		}
		if strings.Join(ids, ",") != strings.Join(want, ",") {
			t.Errorf("%s: /v1/models lists %v, want %v", key, ids, want)
		}
	}
}

// The adapter's home is bounded by adapterLoadFactor (1.25), not by the
// prefix policy's factor (2 here): on two replicas, its first with 2
// requests in flight and the other idle, it would hold 3 of 3, within
// ⌈2/2 × 3⌉ = 3 but past ⌈1.25/2 × 3⌉ = 2, and the request spills.
func TestAdapterHomeBoundedByAdapterFactor(t *testing.T) {
	a, b := startBodyRecorder(t, "/lora/sql.gguf"), startBodyRecorder(t, "/lora/sql.gguf")
	tg := startGateway(t, Options{PrefixLoadFactor: 2}, a.instance("a", engine.VLLM), b.instance("b", engine.VLLM))
	tg.UpdateModels(adapterList, nil)
	first := tg.post(t, "/v1/completions", `{"model":"sql","prompt":"hi"}`)
	home := first.header.Get(ReplicaHeader)
	if first.status != 200 || first.header.Get(RouteHeader) != routing.RouteAdapter {
		t.Fatalf("idle: %d route %q: %s", first.status, first.header.Get(RouteHeader), first.body)
	}
	ep := tg.tbl.Load().byID[home]
	ep.Outstanding.Add(2)
	ans := tg.post(t, "/v1/completions", `{"model":"sql","prompt":"hi"}`)
	ep.Outstanding.Add(-2)
	if at := ans.header.Get(ReplicaHeader); ans.status != 200 || ans.header.Get(RouteHeader) != routing.RouteAdapterSpill || at == home {
		t.Errorf("2 in flight on %s, none on the other: %d route %q at %s, want %q on the other", home, ans.status, ans.header.Get(RouteHeader), at, routing.RouteAdapterSpill)
	}
}
