package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/gatewayclient"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

func TestModelListItems(t *testing.T) {
	l := gatewayapi.ModelList{Models: []gatewayapi.ListedModel{{Name: "a", Min: 0, Replicas: 0}, {Name: "b", Min: 1, Replicas: 3}}}
	items, err := l.Items()
	if err != nil {
		t.Fatal(err)
	}
	if want := `[{"name":"a","min":0,"replicas":0},{"name":"b","min":1,"replicas":3}]`; items["models"] != want {
		t.Errorf("items %q, want %q", items["models"], want)
	}
	back, err := gatewayapi.ParseModelList(items)
	if err != nil || !cmp.Equal(back, l) {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	if items, _ := (gatewayapi.ModelList{}).Items(); items["models"] != "[]" {
		t.Errorf("empty list: %q", items["models"])
	}
	for _, tt := range []struct {
		items map[string]string
		want  string
	}{
		{map[string]string{}, `no item "models"`},
		{map[string]string{"models": `{"name":"a"}`}, `item "models": json: cannot unmarshal object`},
		{map[string]string{"models": `[{"name":""}]`}, `item "models": models[0]: empty name`},
		{map[string]string{"models": `[{"name":"a"},{"name":"a"}]`}, `item "models": models[1]: "a" listed twice`},
		{map[string]string{"models": `[{"name":"a","min":-1}]`}, `item "models": models[0] (a): min -1, replicas 0: want 0 or more`},
	} {
		if _, err := gatewayapi.ParseModelList(tt.items); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%v: %v, want %q", tt.items, err, tt.want)
		}
	}
	if _, err := (gatewayapi.ModelList{Models: []gatewayapi.ListedModel{{Name: "a", Replicas: -2}}}).Items(); err == nil {
		t.Error("a negative count encoded")
	}
}

// NomadModels follows the variable with blocking queries: absent is an
// empty list, each write reaches the gateway, and a variable it cannot
// decode is an error that leaves the last list in force (and says so in
// the demand).
func TestNomadModels(t *testing.T) {
	fake := nomadfake.New()
	defer fake.Close()
	client := fake.Client(t)
	put := func(items map[string]string) {
		t.Helper()
		if _, _, err := client.Variables().Update(&nomadapi.Variable{Path: gatewayapi.ModelsVariable, Items: items}, nil); err != nil {
			t.Fatal(err)
		}
	}
	tg := startGateway(t, Options{Source: StaticSource{}, Models: &NomadModels{Client: client, Wait: time.Second},
		Hold: HoldConfig{Timeout: time.Hour}})
	runGateway(t, tg.Gateway)
	wait.Until(t, "synced", tg.Synced)
	if got := tg.post(t, "/v1/chat/completions", chat("z")); got.status != http.StatusNotFound {
		t.Errorf("no variable: z is %d, want 404", got.status)
	}
	items, _ := gatewayapi.ModelList{Models: []gatewayapi.ListedModel{{Name: "z"}}}.Items()
	put(items)
	wait.Until(t, "z known", func() bool { return tg.tbl.Load().listed["z"].Name == "z" })
	if got := tg.served(t); !cmp.Equal(got, map[string]int{"z": 0}) {
		t.Errorf("/v1/models %v, want z at zero", got)
	}
	put(map[string]string{"models": "not json"})
	wait.Until(t, "the error in the demand", func() bool {
		d, err := gatewayclient.DemandClient{}.Read(t.Context(), tg.srv.URL)
		return err == nil && strings.Contains(d.ModelListError, "nomad variable llmgw/models (namespace default): item \"models\"")
	})
	if tg.tbl.Load().listed["z"].Name != "z" {
		t.Error("a bad variable dropped the last list")
	}
	items, _ = gatewayapi.ModelList{Models: []gatewayapi.ListedModel{{Name: "y", Min: 1, Replicas: 1}}}.Items()
	put(items)
	wait.Until(t, "y replaces z", func() bool {
		tb := tg.tbl.Load()
		return tb.models["z"] == nil && tb.listed["y"].Min == 1
	})
	if d := tg.Demand(); d.ModelListError != "" {
		t.Errorf("error still reported after a good list: %q", d.ModelListError)
	}
}

// /healthz waits for the model list's first answer, or first failure.
func TestSyncedWaitsForTheModelList(t *testing.T) {
	fail := make(chan struct{})
	tg := startGateway(t, Options{Source: StaticSource{}, Models: failingModels{fail}})
	runGateway(t, tg.Gateway)
	wait.Until(t, "discovery published", func() bool { return tg.discoveredYet() })
	if tg.Synced() {
		t.Fatal("synced before the model list answered")
	}
	close(fail)
	wait.Until(t, "synced", tg.Synced)
	if d := tg.Demand(); d.ModelListError != "boom" {
		t.Errorf("model list error %q", d.ModelListError)
	}
}

type failingModels struct{ fail chan struct{} }

func (f failingModels) Run(ctx context.Context, publish func(gatewayapi.ModelList, error)) error {
	select {
	case <-f.fail:
		publish(gatewayapi.ModelList{}, errBoom)
	case <-ctx.Done():
	}
	<-ctx.Done()
	return nil
}

var errBoom = errors.New("boom")

func (tg *testGateway) discoveredYet() bool {
	tg.updMu.Lock()
	defer tg.updMu.Unlock()
	return tg.discovered
}
