package controller

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// switchEngine serves the fake engine it holds now; every allocation's
// address is dialled to it.
type switchEngine struct {
	mu  sync.Mutex
	srv http.Handler
}

func (s *switchEngine) set(t *testing.T, args ...string) {
	t.Helper()
	cfg, err := fakeengine.Parse(args, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := fakeengine.LoadAdapters(cfg); err != nil {
		t.Fatal(err)
	}
	srv := fakeengine.NewServer(cfg, io.Discard, io.Discard)
	srv.Load(t.Context())
	s.mu.Lock()
	s.srv = srv.Handler()
	s.mu.Unlock()
}

func (s *switchEngine) client(t *testing.T) *http.Client {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		h := s.srv
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, ts.Listener.Addr().String())
	}}}
}

// adapterCatalog is model alpha with adapters sql and chat on engine, the
// profile's extra lines (HCL) after its own.
func adapterCatalog(engine, source, sql, chat string, extra ...string) string {
	return fmt.Sprintf(`
model "alpha" {
  source   = %q
  replicas = 1
  adapter "sql" {
    path = %q
  }
  adapter "chat" {
    path = %q
  }
  profile "h1" {
    engine = %q
    gpu    = "NVIDIA H200"
    watts  = 500
%s
  }
}
`, source, sql, chat, engine, strings.Join(append(extra[:len(extra):len(extra)], ""), "\n"))
}

func peftDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := fakeengine.WritePEFTAdapter(dir, 8); err != nil {
		t.Fatal(err)
	}
	return dir
}

func alpha0(t *testing.T, c *ctl) controllerapi.ReplicaView {
	for _, r := range c.replicas(t) {
		if r.ID == "alpha-0" {
			return r
		}
	}
	return controllerapi.ReplicaView{}
}

func adaptersOf(r controllerapi.ReplicaView) string {
	if r.Engine == nil {
		return "no engine reading"
	}
	return fmt.Sprintf("%+v (error %q) events %+v", r.Engine.Adapters, r.Engine.AdaptersError, r.Engine.AdapterEvents)
}

// The controller reads which of the catalog's adapters a vLLM replica
// serves from its GET /v1/models: one it does not list is not loaded, an
// event on the replica, and loaded (with an event) once it is listed; one
// listed from another path than the catalog's is not loaded; an engine
// whose list cannot be read leaves them unverified, without events.
//
// The replica runs two API servers (data_parallel 2): its adapters are
// given at start (TestRuntimeAdaptersOnVLLM: with one, at runtime).
func TestReplicaAdaptersFromVLLM(t *testing.T) {
	sql, chat, elsewhere := peftDir(t), peftDir(t), peftDir(t)
	eng := &switchEngine{}
	eng.set(t, "serve", "org/alpha", "--served-model-name", "alpha", "--enable-lora", "--lora-modules", "sql="+sql)
	e := newEnv(t, sixNodes, adapterCatalog("vllm", "org/alpha", sql, chat, "    gpus = 2", "    data_parallel = 2"), `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl", func(o *Options) { o.EngineMetricsInterval, o.EngineClient = 100*time.Millisecond, eng.client(t) })
	e.Pass(c)
	e.ServeAll()
	e.Pass(c)

	wait.For(t, "chat not loaded on alpha-0", func() (bool, string) {
		r := alpha0(t, c)
		if r.Engine == nil || len(r.Engine.Adapters) != 2 {
			return false, adaptersOf(r)
		}
		a := r.Engine.Adapters
		return a[0] == controllerapi.AdapterState{Name: "sql", Loaded: true} &&
			a[1] == controllerapi.AdapterState{Name: "chat", Note: "not in the engine's GET /v1/models" + leftOutHint} &&
			len(r.Engine.AdapterEvents) == 1 && r.Engine.AdapterEvents[0].Adapter == "chat" && r.Engine.AdapterEvents[0].Event == "not loaded", adaptersOf(r)
	})
	wait.For(t, "the gauges", func() (bool, string) {
		_, page := ctlharness.Call(t, http.MethodGet, c.URL+"/metrics", "", nil, nil)
		return strings.Contains(page, `llmgw_replica_adapter_loaded{adapter="chat",model="alpha",replica="alpha-0"} 0`) &&
			strings.Contains(page, `llmgw_replica_adapter_loaded{adapter="sql",model="alpha",replica="alpha-0"} 1`), page
	})
	// Rounds go on (readings two rounds later): the event is not repeated.
	first := alpha0(t, c).Engine.Reading.At
	wait.For(t, "two more rounds", func() (bool, string) {
		r := alpha0(t, c)
		return r.Engine.Reading.At.After(first.Add(200 * time.Millisecond)), adaptersOf(r)
	})
	if ev := alpha0(t, c).Engine.AdapterEvents; len(ev) != 1 {
		t.Errorf("events %+v, want the one", ev)
	}
	eng.set(t, "serve", "org/alpha", "--served-model-name", "alpha", "--enable-lora", "--lora-modules", "sql="+sql, "chat="+chat)
	wait.For(t, "chat loaded", func() (bool, string) {
		r := alpha0(t, c)
		ev := r.Engine.AdapterEvents
		return r.Engine.Adapters[1].Loaded && len(ev) == 2 && ev[1].Event == "loaded" && ev[1].Adapter == "chat", adaptersOf(r)
	})
	// Served from another path than the catalog's: not loaded.
	eng.set(t, "serve", "org/alpha", "--served-model-name", "alpha", "--enable-lora", "--lora-modules", "sql="+elsewhere, "chat="+chat)
	wait.For(t, "sql from elsewhere", func() (bool, string) {
		r := alpha0(t, c)
		a := r.Engine.Adapters[0]
		return !a.Loaded && a.Note == fmt.Sprintf("the engine serves \"sql\" from %s, not the catalog's %s", elsewhere, sql), adaptersOf(r)
	})
	// An engine without the adapters' list: unverified, no event.
	before := len(alpha0(t, c).Engine.AdapterEvents)
	eng.mu.Lock()
	eng.srv = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "gone", http.StatusServiceUnavailable)
	})
	eng.mu.Unlock()
	wait.For(t, "unverified", func() (bool, string) {
		r := alpha0(t, c)
		for _, a := range r.Engine.Adapters {
			if a.Loaded || a.Note != unverified+r.Engine.AdaptersError {
				return false, adaptersOf(r)
			}
		}
		return r.Engine.AdaptersError == "GET /v1/models: 503 Service Unavailable: gone", adaptersOf(r)
	})
	if got := len(alpha0(t, c).Engine.AdapterEvents); got != before {
		t.Errorf("%d events after the list failed, want %d", got, before)
	}
	wait.For(t, "no gauge while unverified", func() (bool, string) {
		_, page := ctlharness.Call(t, http.MethodGet, c.URL+"/metrics", "", nil, nil)
		return !strings.Contains(page, `llmgw_replica_adapter_loaded{`), page
	})
}

// llama.cpp's replica: the adapters it loaded are matched by path from
// its GET /lora-adapters, with their ids (numbered without one the driver
// left out).
func TestReplicaAdaptersFromLlamaCpp(t *testing.T) {
	dir := t.TempDir()
	sql, chat := filepath.Join(dir, "sql.gguf"), filepath.Join(dir, "chat.gguf")
	for _, p := range []string{sql, chat} {
		if err := os.WriteFile(p, []byte("GGUF"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	eng := &switchEngine{}
	// The driver left sql out (it did not fit the model): chat is id 0.
	eng.set(t, "-m", "/models/alpha.gguf", "--lora", chat, "--lora-init-without-apply")
	e := newEnv(t, sixNodes, adapterCatalog("llamacpp", "/models/alpha.gguf", sql, chat, "    gpus = 1"), `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl", func(o *Options) { o.EngineMetricsInterval, o.EngineClient = 100*time.Millisecond, eng.client(t) })
	e.Pass(c)
	e.ServeAll()
	e.Pass(c)
	wait.For(t, "chat loaded as id 0, sql not loaded", func() (bool, string) {
		r := alpha0(t, c)
		if r.Engine == nil || len(r.Engine.Adapters) != 2 {
			return false, adaptersOf(r)
		}
		a := r.Engine.Adapters
		return !a[0].Loaded && a[0].Note == "not in the engine's GET /lora-adapters"+leftOutHint && a[0].ID == nil &&
			a[1].Loaded && a[1].ID != nil && *a[1].ID == 0 &&
			len(r.Engine.AdapterEvents) == 1 && r.Engine.AdapterEvents[0].Adapter == "sql", adaptersOf(r)
	})
}
