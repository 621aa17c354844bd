package controller

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// fetchedAdapterCatalog: model alpha on engine with adapter sql from the
// nodes' stores (a URL) and chat at a path.
func fetchedAdapterCatalog(engine, source, chat string) string {
	return fmt.Sprintf(`
model "alpha" {
  source   = %q
  replicas = 1
  adapter "sql" {
    weights {
      urls = ["https://example.com/lora/sql.gguf"]
    }
  }
  adapter "chat" {
    path = %q
  }
  profile "h1" {
    engine = %q
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 500
  }
}
`, source, chat, engine)
}

// fetchedAdapterLink makes, in a replica's task directory, the driver's
// link of an adapter the store fetched: a file (llama.cpp) or a PEFT
// directory.
func fetchedAdapterLink(t *testing.T, name string, peft bool) string {
	t.Helper()
	link := filepath.Join(t.TempDir(), "alloc", "a1", "engine", "llmgw-adapters", name)
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if peft {
		if err := fakeengine.WritePEFTAdapter(link, 8); err != nil {
			t.Fatal(err)
		}
		return link
	}
	if err := os.WriteFile(link, []byte("GGUF"), 0o600); err != nil {
		t.Fatal(err)
	}
	return link
}

// An adapter the nodes' stores fetch is loaded where the engine lists the
// driver's link under the replica's task directory: llama.cpp by that
// path (with its id), vLLM by name with that path; an engine that does
// not list it (the store could not fetch it, and the driver left it out)
// has it not loaded, with an event.
func TestReplicaFetchedAdapters(t *testing.T) {
	t.Run("llamacpp", func(t *testing.T) {
		chat := filepath.Join(t.TempDir(), "chat.gguf")
		if err := os.WriteFile(chat, []byte("GGUF"), 0o600); err != nil {
			t.Fatal(err)
		}
		sql := fetchedAdapterLink(t, "sql", false)
		eng := &switchEngine{}
		eng.set(t, "-m", "/models/alpha.gguf", "--lora", sql+","+chat, "--lora-init-without-apply")
		e := newEnv(t, sixNodes, fetchedAdapterCatalog("llamacpp", "/models/alpha.gguf", chat), `headroom = 0`)
		e.HoldLock()
		c := e.start("ctl", func(o *Options) { o.EngineMetricsInterval, o.EngineClient = 100*time.Millisecond, eng.client(t) })
		e.Pass(c)
		e.ServeAll()
		e.Pass(c)
		wait.For(t, "sql loaded as id 0, chat as 1", func() (bool, string) {
			r := alpha0(t, c)
			if r.Engine == nil || len(r.Engine.Adapters) != 2 {
				return false, adaptersOf(r)
			}
			a := r.Engine.Adapters
			return a[0].Loaded && a[0].ID != nil && *a[0].ID == 0 && a[1].Loaded && a[1].ID != nil && *a[1].ID == 1 &&
				len(r.Engine.AdapterEvents) == 0, adaptersOf(r)
		})
		// The store could not fetch sql: the engine lists chat alone.
		eng.set(t, "-m", "/models/alpha.gguf", "--lora", chat, "--lora-init-without-apply")
		wait.For(t, "sql not loaded", func() (bool, string) {
			r := alpha0(t, c)
			a := r.Engine.Adapters
			ev := r.Engine.AdapterEvents
			return !a[0].Loaded && a[0].ID == nil && a[0].Note == "not in the engine's GET /lora-adapters"+leftOutHint &&
				a[1].Loaded && *a[1].ID == 0 && len(ev) == 1 && ev[0].Adapter == "sql" && ev[0].Event == "not loaded", adaptersOf(r)
		})
	})
	t.Run("vllm", func(t *testing.T) {
		chat := peftDir(t)
		sql := fetchedAdapterLink(t, "sql", true)
		other := peftDir(t)
		eng := &switchEngine{}
		eng.set(t, "serve", "org/alpha", "--served-model-name", "alpha", "--enable-lora", "--lora-modules", "sql="+sql, "chat="+chat)
		e := newEnv(t, sixNodes, fetchedAdapterCatalog("vllm", "org/alpha", chat), `headroom = 0`)
		e.HoldLock()
		c := e.start("ctl", func(o *Options) { o.EngineMetricsInterval, o.EngineClient = 100*time.Millisecond, eng.client(t) })
		e.Pass(c)
		e.ServeAll()
		e.Pass(c)
		wait.For(t, "both loaded", func() (bool, string) {
			r := alpha0(t, c)
			if r.Engine == nil || len(r.Engine.Adapters) != 2 {
				return false, adaptersOf(r)
			}
			return r.Engine.Adapters[0].Loaded && r.Engine.Adapters[1].Loaded, adaptersOf(r)
		})
		// sql served from a path that is not the driver's link: not loaded.
		eng.set(t, "serve", "org/alpha", "--served-model-name", "alpha", "--enable-lora", "--lora-modules", "sql="+other, "chat="+chat)
		wait.For(t, "sql from elsewhere", func() (bool, string) {
			r := alpha0(t, c)
			a := r.Engine.Adapters[0]
			return !a.Loaded && a.Note == fmt.Sprintf("the engine serves \"sql\" from %s, not the catalog's llmgw-adapters/sql", other), adaptersOf(r)
		})
	})
}
