package gatewaycmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/gateway"
	"github.com/llmgw/llmgw/gateway/config"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/gatewayclient"
	"github.com/llmgw/llmgw/internal/testing/consulfake"
	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/syncbuf"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// waitFor bounds a test's waits on a channel or a client, as wait.For's
// polls are bounded.
const waitFor = wait.Timeout

// startEngine serves a loaded in-process fake-engine of model on loopback
// until the test ends, and returns its port.
func startEngine(t *testing.T, model string) int {
	t.Helper()
	cfg := fakeengine.Defaults()
	cfg.Model, cfg.TokensPerSecond = model, 0
	fe := fakeengine.NewServer(cfg, io.Discard, io.Discard)
	fe.Load(t.Context())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	engine := &http.Server{Handler: fe.Handler(), ReadHeaderTimeout: time.Second}
	go func() { _ = engine.Serve(ln) }()
	t.Cleanup(func() { _ = engine.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// The whole command against a fake Consul and an in-process fake-engine:
// it registers itself, discovers the replica, routes to it, serves
// metrics, and deregisters when stopped: health, registration, the model
// list, a completion, a streamed completion and the metrics.
func TestGatewayWithConsul(t *testing.T) {
	const model = "llama-3.1-8b"
	enginePort := startEngine(t, model)

	c := consulfake.New()
	t.Cleanup(c.Close)
	c.Register(consulfake.Service{ID: "r0", Name: render.ServiceName(model), Address: "127.0.0.1", Port: enginePort,
		Tags: []string{"llmgw", "model=" + model, "profile=p", "replica=" + model + "-0"}})

	addr, stderr, stop := startGateway(t, []string{"--listen", "127.0.0.1:0", "--consul", c.Addr(), "--log-level", "debug"})
	base := "http://" + addr
	port, _ := strconv.Atoi(addr[strings.LastIndex(addr, ":")+1:])

	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	wait.Until(t, "/healthz 200", func() bool { code, _ := get("/healthz"); return code == 200 })

	var reg consulfake.Service
	wait.Until(t, "the gateway registered in consul", func() bool {
		var ok bool
		reg, ok = c.Service(registrationID(port))
		return ok
	})
	if diff := cmp.Diff([]string{"llmgw-gateway"}, reg.Tags); diff != "" || reg.Name != gatewayapi.GatewayServiceName || reg.Address != "127.0.0.1" ||
		reg.Check == nil || reg.Check.HTTP != base+"/healthz" {
		t.Errorf("registration: %+v %+v", reg, reg.Check)
	}

	wait.Until(t, "the model served", func() bool {
		_, body := get("/v1/models")
		return strings.Contains(body, `"id":"`+model+`"`)
	})
	resp, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get(gateway.ReplicaHeader) != model+"-0" {
		t.Fatalf("chat: %d %q %s", resp.StatusCode, resp.Header.Get(gateway.ReplicaHeader), b)
	}
	resp, err = http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") ||
		strings.Count(string(b), "data: ") < 4 || !strings.HasSuffix(strings.TrimSpace(string(b)), "data: [DONE]") {
		t.Fatalf("streamed chat: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	_, metrics := get("/metrics")
	for _, want := range []string{`llmgw_gateway_requests_total{code="200",model="llama-3.1-8b"} 2`, "llmgw_gateway_breaker_state{", "go_goroutines"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	if err := stop(); err != nil {
		t.Fatalf("gateway: %v", err)
	}
	if _, ok := c.Service(registrationID(port)); ok {
		t.Error("still registered after stopping")
	}
	if !strings.Contains(stderr.String(), `"msg":"registered in consul"`) {
		t.Errorf("log lacks the registration:\n%s", stderr.String())
	}
}

func registrationID(port int) string {
	r, _ := config.NewRegistration("", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	return r.ID
}

func TestFlags(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--consul", "a:1", "--nomad", "http://b:2"}, "none of the others can be"},
		{[]string{"--consul", ""}, "--consul: empty address"},
		{[]string{"--log-level", "loud", "--listen", "127.0.0.1:0"}, "--log-level"},
		{[]string{"--max-body-completions", "0", "--listen", "127.0.0.1:0"}, "--max-body-completions 0, --body-memory 268435456: want more than 0, and no more than the body memory"},
		{[]string{"--max-json-depth", "20000", "--listen", "127.0.0.1:0"}, "--max-json-depth: 20000: want 1 to 10000"},
		{[]string{"--body-read-timeout", "0s", "--listen", "127.0.0.1:0"}, "--body-read-timeout: 0s: want more than 0"},
		{[]string{"--cors-origins", "chat.example.com", "--listen", "127.0.0.1:0"}, `--cors-origins: origin "chat.example.com": want "*" or scheme://host[:port]`},
		{[]string{"--breaker-open", "2m", "--breaker-max-open", "1m", "--listen", "127.0.0.1:0"}, "--breaker-open"},
		{[]string{"--listen", "256.0.0.1:1", "--nomad", "http://127.0.0.1:1"}, "--listen: 256.0.0.1:1: "},
		{[]string{"--listen", "127.0.0.1:0", "--consul", "127.0.0.1:1", "--keys-variable", "llmgw/keys"}, "--keys-variable: with --consul, --models-nomad names the Nomad to read the keys from"},
		{[]string{"--listen", "127.0.0.1:0", "--nomad", "http://127.0.0.1:1", "--tls-cert-file", "/nonexistent/gw.crt", "--tls-key-file", "/nonexistent/gw.key"}, "--tls-cert-file: certificate /nonexistent/gw.crt, key /nonexistent/gw.key: "},
		{[]string{"--listen", "127.0.0.1:0", "--nomad", "http://127.0.0.1:1", "--keys-file", "/nonexistent/keys.hcl"}, "--keys-file: "},
		{[]string{"extra"}, "unknown command"},
		{[]string{"--routing", "chat=fastest", "--listen", "127.0.0.1:0"}, `--routing: routing for model "chat": "fastest" is not a policy`},
		{[]string{"--routing", "prefix", "--listen", "127.0.0.1:0"}, `--routing: "prefix": want MODEL=POLICY`},
		{[]string{"--prefix-load-factor", "0.9", "--listen", "127.0.0.1:0"}, "--prefix-load-factor: 0.9: want 1 or more"},
		{[]string{"--prefix-opening-limit", "-2", "--listen", "127.0.0.1:0"}, "--prefix-opening-limit: -2: want 0"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cmd := NewCommand()
			cmd.SetArgs(tt.args)
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// A setting the configuration file gave, found wrong only when serving,
// is named by the file's line, as the settings' checks name it.
func TestServeErrorNamesTheFileLine(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	path := writeConfig(t, "nomad = \"http://127.0.0.1:1\"\n\nlisten = \""+taken.Addr().String()+"\"\n")
	cmd := NewCommand()
	cmd.SetArgs([]string{"--config", path})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	want := path + ":3: listen: " + taken.Addr().String() + ": "
	if err := cmd.Execute(); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %v, want an error starting %q", err, want)
	}
}

// The command with its settings in a file: the file's consul, tags and
// check interval reach the registration, and the flag's --listen wins
// over the file's (which could not be listened on).
func TestGatewayConfigFile(t *testing.T) {
	c := consulfake.New()
	t.Cleanup(c.Close)
	path := writeConfig(t, `
listen                  = "256.0.0.1:1"
consul                  = "`+c.Addr()+`"
register_tags           = ["edge"]
register_check_interval = "7s"
consul_wait             = "1s"
log_level               = "debug"
`)
	addr, stderr, stop := startGateway(t, []string{"--config", path, "--listen", "127.0.0.1:0"})
	port, _ := strconv.Atoi(addr[strings.LastIndex(addr, ":")+1:])
	var reg consulfake.Service
	wait.Until(t, "the gateway registered in consul", func() bool {
		var ok bool
		reg, ok = c.Service(registrationID(port))
		return ok
	})
	if diff := cmp.Diff([]string{"llmgw-gateway", "edge"}, reg.Tags); diff != "" || reg.Check == nil || reg.Check.Interval != "7s" {
		t.Errorf("registration %+v %+v (tags -want +got):\n%s", reg, reg.Check, diff)
	}
	if !strings.Contains(stderr.String(), `"config":"`+path+`"`) {
		t.Errorf("log does not name the config file:\n%s", stderr.String())
	}
	if err := stop(); err != nil {
		t.Fatalf("gateway: %v", err)
	}
}

// With --consul and --models-nomad, the model list comes from that Nomad's
// variable (at --models-variable in --models-namespace): a model at zero is
// listed, its request held until a replica registers in Consul, and the
// demand endpoint and /metrics show it held.
func TestGatewayModelListFromNomad(t *testing.T) {
	const model = "qwen-7b"
	nf := nomadfake.New()
	t.Cleanup(nf.Close)
	items, err := gatewayapi.ModelList{Models: []gatewayapi.ListedModel{{Name: model}}}.Items()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := nf.Client(t).Variables().Update(&nomadapi.Variable{Namespace: "ml", Path: "ops/models", Items: items},
		&nomadapi.WriteOptions{Namespace: "ml"}); err != nil {
		t.Fatal(err)
	}
	c := consulfake.New()
	t.Cleanup(c.Close)

	addr, stderr, stop := startGateway(t, []string{"--listen", "127.0.0.1:0", "--consul", c.Addr(), "--register=false", "--models-nomad", nf.URL(),
		"--models-namespace", "ml", "--models-variable", "ops/models", "--hold-timeout", "1h", "--consul-wait", "2s"})
	base := "http://" + addr
	get := func(path string) string {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	wait.Until(t, "the model listed at zero", func() bool {
		return strings.Contains(get("/v1/models"), `"id":"`+model+`","object":"model","created":`) &&
			strings.Contains(get("/v1/models"), `"llmgw":{"state":"scaled_to_zero"}`)
	})
	answer := make(chan string, 1)
	go func() {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`))
		if err != nil {
			answer <- err.Error()
			return
		}
		defer resp.Body.Close()
		answer <- fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get(gateway.ReplicaHeader))
	}()
	var d gatewayapi.Demand
	wait.Until(t, "the request held", func() bool {
		d, err = gatewayclient.DemandClient{}.Read(t.Context(), base)
		return err == nil && len(d.Models) == 1 && d.Models[0].Queued == 1
	})
	if m := d.Models[0]; m.Model != model || m.Outstanding != 1 || m.ArrivalsTotal != 1 || m.State != gatewayapi.StateScaledToZero {
		t.Errorf("demand %+v", m)
	}
	if !strings.Contains(get("/metrics"), `llmgw_gateway_queued_requests{model="`+model+`"} 1`) {
		t.Error("/metrics lacks the held request")
	}

	enginePort := startEngine(t, model)
	c.Register(consulfake.Service{ID: "r0", Name: render.ServiceName(model), Address: "127.0.0.1", Port: enginePort,
		Tags: []string{"llmgw", "model=" + model, "profile=p", "replica=" + model + "-0"}})
	select {
	case got := <-answer:
		if got != "200 "+model+"-0" {
			t.Errorf("held request: %s, want 200 from %s-0", got, model)
		}
	case <-time.After(waitFor):
		t.Fatal("the held request was not answered after the replica registered")
	}
	if !strings.Contains(stderr.String(), `"models":"nomad `+nf.URL()+` variable ops/models (namespace ml)"`) {
		t.Errorf("the log does not say where the model list is read:\n%s", stderr.String())
	}
	if err := stop(); err != nil {
		t.Fatalf("gateway: %v", err)
	}
}

// startGateway runs the gateway command with args until stop or the end of
// the test, and returns the address it listens on and what it writes to
// stderr. stop ends it and returns what it ended with; at the end of the
// test an error it stops with fails the test.
func startGateway(t *testing.T, args []string) (addr string, stderr *syncbuf.Buffer, stop func() error) {
	t.Helper()
	addrc := make(chan string, 1)
	cmd := newCommand(func(a string) { addrc <- a })
	cmd.SetArgs(args)
	stderr = &syncbuf.Buffer{}
	cmd.SetErr(stderr)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(waitFor):
				err = errors.New("did not stop")
			}
		})
		return err
	}
	select {
	case addr = <-addrc:
		t.Cleanup(func() {
			if err := stop(); err != nil {
				t.Errorf("gateway stopped with %v\n%s", err, stderr.String())
			}
		})
		return addr, stderr, stop
	case err := <-done:
		cancel()
		t.Fatalf("gateway ended: %v\n%s", err, stderr.String())
	case <-time.After(waitFor):
		_ = stop()
		t.Fatal("gateway did not listen")
	}
	return "", nil, nil
}
