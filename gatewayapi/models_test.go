package gatewayapi

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A model's adapters travel in the list with the path its replicas load
// them from and their scale, and come back as they went.
func TestModelListAdaptersRoundTrip(t *testing.T) {
	l := ModelList{Models: []ListedModel{{Name: "base", Min: 1, Replicas: 1, Adapters: []ListedAdapter{
		{Name: "sql", Path: "/srv/lora/sql.gguf", Scale: 1}, {Name: "chat", Path: "/srv/lora/chat.gguf", Scale: 0.5},
	}}}}
	items, err := l.Items()
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"name":"base","min":1,"replicas":1,"adapters":[{"name":"sql","path":"/srv/lora/sql.gguf","scale":1},{"name":"chat","path":"/srv/lora/chat.gguf","scale":0.5}]}]`
	if items[ModelsItem] != want {
		t.Errorf("items %s, want %s", items[ModelsItem], want)
	}
	back, err := ParseModelList(items)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(l, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

// Bad adapters are refused, naming the model's entry, the adapter's
// and the field.
func TestParseModelListBadAdapters(t *testing.T) {
	for _, tt := range []struct{ models, want string }{
		{`[{"name":"a","adapters":[{"name":"","path":"/x","scale":1}]}]`, `item "models": models[0] (a): adapters[0]: empty name`},
		{`[{"name":"a","adapters":[{"name":"x","path":"","scale":1}]}]`, `item "models": models[0] (a): adapters[0] (x): empty path`},
		{`[{"name":"a","adapters":[{"name":"x","path":"/x","scale":0}]}]`, `item "models": models[0] (a): adapters[0] (x): scale 0: want a number above 0`},
		{`[{"name":"a","adapters":[{"name":"x","path":"/x"}]}]`, `item "models": models[0] (a): adapters[0] (x): scale 0: want a number above 0`},
		{`[{"name":"a","adapters":[{"name":"x","path":"/x","scale":1},{"name":"y","path":"/x","scale":1}]}]`, `item "models": models[0] (a): adapters[1] (y): path "/x" given twice in the model`},
		{`[{"name":"a","adapters":[{"name":"b","path":"/x","scale":1}]},{"name":"b"}]`, `item "models": models[0] (a): adapters[0]: name "b" is a model's`},
		{`[{"name":"a","adapters":[{"name":"x","path":"/x","scale":1}]},{"name":"b","adapters":[{"name":"x","path":"/y","scale":1}]}]`,
			`item "models": models[1] (b): adapters[0]: name "x" is also models[0] (a): adapters[0]`},
		{`[{"name":"a","adapters":{"name":"x"}}]`, `item "models": json: cannot unmarshal object`},
		{`[{"name":"a","adapters":[{"name":"x","path":"../x","scale":1}]}]`, `item "models": models[0] (a): adapters[0] (x): path "../x": want an absolute path, or a clean one under the replica's task directory`},
		{`[{"name":"a","adapters":[{"name":"x","path":"a//x","scale":1}]}]`, `item "models": models[0] (a): adapters[0] (x): path "a//x": want an absolute path`},
	} {
		_, err := ParseModelList(map[string]string{ModelsItem: tt.models})
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.models, err, tt.want)
		}
	}
}

// An engine's listed path is an adapter's when it is the adapter's
// absolute path, or ends in its relative one (an adapter the nodes' stores
// fetch, which each replica loads from under its own task directory).
func TestListedAdapterLoadedFrom(t *testing.T) {
	abs := ListedAdapter{Name: "sql", Path: "/srv/lora/sql.gguf"}
	rel := ListedAdapter{Name: "sql", Path: "llmgw-adapters/sql"}
	for _, c := range []struct {
		a    ListedAdapter
		p    string
		want bool
	}{
		{abs, "/srv/lora/sql.gguf", true},
		{abs, "/x/srv/lora/sql.gguf", false},
		{rel, "/var/lib/nomad/alloc/0a1b/engine/llmgw-adapters/sql", true},
		{rel, "/var/lib/nomad/alloc/0a1b/engine/llmgw-adapters/sql2", false},
		{rel, "/var/lib/nomad/alloc/0a1b/engine/xllmgw-adapters/sql", false},
		{rel, "llmgw-adapters/sql", false},
		{ListedAdapter{Name: "sql"}, "/srv/lora/sql.gguf", false},
	} {
		if got := c.a.LoadedFrom(c.p); got != c.want {
			t.Errorf("%q.LoadedFrom(%q) = %v, want %v", c.a.Path, c.p, got, c.want)
		}
	}
}
