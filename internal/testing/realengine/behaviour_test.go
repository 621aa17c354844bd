package realengine_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/enginemetrics"
	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/realengine"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

const captureFile = "../../../enginemetrics/testdata/llamacpp.txt"

var get = realengine.Get

// families are the metric family names and types in a Prometheus text.
func families(t *testing.T, text, prefix string) map[string]string {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse metrics: %v\n%s", err, text)
	}
	out := map[string]string{}
	for name, f := range fams {
		if strings.HasPrefix(name, prefix) {
			out[name] = strings.ToLower(f.GetType().String())
		}
	}
	return out
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// longStream asks for a long answer: with ignore_eos the tiny model says
// "Hello world!" over and over until n_predict.
const longStream = `{"stream":true,"max_tokens":100000,"ignore_eos":true,"messages":[{"role":"user","content":"Go on."}]}`

// streams starts n streamed requests that run until ctx ends.
func streams(ctx context.Context, t *testing.T, url string, n int) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(longStream))
			resp, err := realengine.Client.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		})
	}
	return &wg
}

// What llmgw relies on of the real server, seen on the real server: busy
// but healthy, the slots endpoint that says busy, its metric families (the
// engine descriptor's names among them; no KV-cache gauge), which
// fake-engine's llama.cpp mode serves exactly, and the load lines the
// driver turns into progress. With -update the metrics capture in
// enginemetrics/testdata is rewritten from the busy server.
func TestRealEngineBehaviour(t *testing.T) {
	s := realengine.Start(t, realengine.TinyModel(t))
	ctx, cancel := context.WithCancel(t.Context())
	wg := streams(ctx, t, s.URL, 4) // 2 slots: 2 processing, 2 deferred
	defer func() { cancel(); wg.Wait() }()

	names, _ := engine.MetricsOf(engine.LlamaCpp)
	var text string
	wait.Until(t, "2 requests processing and 2 deferred", func() bool {
		_, text = get(t, s.URL+"/metrics")
		smp, err := enginemetrics.Parse(strings.NewReader(text), names, time.Now())
		return err == nil && smp.Running == enginemetrics.Known(2) && smp.Waiting == enginemetrics.Known(2)
	}, wait.Within(time.Minute))
	if code, _ := get(t, s.URL+"/health"); code != 200 {
		t.Errorf("/health with every slot busy: %d, want 200", code)
	}
	if code, _ := get(t, s.URL+"/slots?fail_on_no_slot=1"); code != 503 {
		t.Errorf("/slots?fail_on_no_slot=1 with every slot busy: %d, want 503", code)
	}
	smp, err := enginemetrics.Parse(strings.NewReader(text), names, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if smp.KVCache.Known || !slices.Contains(smp.Absent, enginemetrics.FieldKVCacheUsage) {
		t.Errorf("KV cache %v, absent %v: want absent (llama-server 0.4.0 has no such gauge)", smp.KVCache, smp.Absent)
	}
	if !smp.Tokens.Known {
		t.Errorf("generated tokens unknown in\n%s", text)
	}
	real := families(t, text, "llamacpp:")
	if *update {
		head := "# llama.cpp 0.4.0 (80fb11a) llama-server --metrics -np 2, busy with 4 streams: captured from the real server by internal/testing/realengine (go test -run RealEngineBehaviour -update).\n"
		if err := os.WriteFile(captureFile, []byte(head+text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(captureFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(families(t, string(b), "llamacpp:")), keys(real); !slices.Equal(got, want) {
		t.Errorf("enginemetrics/testdata/llamacpp.txt has families %v, the real server %v (rewrite it with -update)", got, want)
	}
	for _, m := range []engine.Metric{names.RequestsWaiting, names.RequestsRunning, names.GeneratedTokens} {
		if real[m.Name] != string(m.Type) {
			t.Errorf("the descriptor reads %s as a %s; the real server has %q", m.Name, m.Type, real[m.Name])
		}
	}

	fake := fakeMetrics(t)
	if diff := cmpMaps(real, fake); diff != "" {
		t.Errorf("fake-engine's llama.cpp families differ from the real server's:\n%s", diff)
	}

	cancel()
	wg.Wait()
	out := s.Output()
	var progress []int
	for _, line := range strings.Split(out, "\n") {
		if p, ok := engine.ParseProgressFor(engine.LlamaCpp, line); ok {
			progress = append(progress, p.Percent)
		}
	}
	if !slices.Equal(progress, []int{0, 100}) {
		t.Errorf("progress %v read from the real log, want [0 100] (loading, then loaded)", progress)
	}
}

func cmpMaps(real, fake map[string]string) string {
	var b strings.Builder
	for _, k := range keys(real) {
		if fake[k] != real[k] {
			b.WriteString("  " + k + ": real " + real[k] + ", fake " + fake[k] + "\n")
		}
	}
	for _, k := range keys(fake) {
		if _, ok := real[k]; !ok {
			b.WriteString("  " + k + ": only in fake-engine\n")
		}
	}
	return b.String()
}

// fakeMetrics runs fake-engine as llama.cpp in the process and scrapes it.
func fakeMetrics(t *testing.T) map[string]string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fakeengine.Run(ctx, fakeengine.Options{
			Args: []string{"-m", "/m.gguf", "--metrics"}, Stdout: io.Discard, Stderr: io.Discard, Listener: ln,
		})
	}()
	defer func() { cancel(); <-done }()
	url := "http://" + ln.Addr().String()
	if err := llamabuild.WaitReady(t.Context(), url, done, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	_, text := get(t, url+"/metrics")
	return families(t, text, "llamacpp:")
}

// While the model loads, /health answers 503 "Loading model": a FIFO as the
// model file holds the load open.
func TestRealEngineLoading(t *testing.T) {
	realengine.Require(t)
	fifo := filepath.Join(t.TempDir(), "m.gguf")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	s := realengine.Launch(t, fifo)
	var code int
	var body string
	wait.Until(t, "an answer from /health", func() bool {
		resp, err := realengine.Client.Get(s.URL + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		code, body = resp.StatusCode, string(b)
		return true
	}, wait.Within(time.Minute))
	if code != 503 || !strings.Contains(body, `"message":"Loading model"`) {
		t.Errorf("/health while loading: %d %s, want 503 Loading model", code, body)
	}
	if s.Exited() {
		t.Errorf("the server exited while its model was loading:\n%s", s.Output())
	}
}
