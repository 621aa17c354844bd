package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/syncbuf"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// startEngine is a fake engine of model m on loopback whose requests go
// through front first: front gets the whole body and answers itself
// (returning true), or leaves the request to the engine.
func startEngine(t *testing.T, id, model string, front func(w http.ResponseWriter, r *http.Request, body []byte) bool) Instance {
	t.Helper()
	cfg := fakeengine.Defaults()
	cfg.Model = model
	cfg.TokensPerSecond = 0
	fe := fakeengine.NewServer(cfg, io.Discard, io.Discard)
	fe.Load(t.Context())
	inner := fe.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if front != nil && front(w, r, b) {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return Instance{ID: id, Model: model, Replica: id, Address: strings.TrimPrefix(srv.URL, "http://"), Weight: 1}
}

// A request after which its replica dropped the connection is not tried
// on another replica: it may be what made the replica fail (an engine
// that crashes on a body would crash every replica in turn). The client
// gets a 502; the event is logged at warn, naming the model, the replica
// and the key, never the body; llmgw_gateway_poison_requests_total counts
// it. A request that never reached the replica (refused) is retried.
func TestPoisonRequestNotRetried(t *testing.T) {
	const secret = "SECRET-PROMPT-TEXT"
	small := `{"model":"m","messages":[{"role":"user","content":"` + secret + `"}]}`
	large := `{"model":"m","messages":[{"role":"user","content":"` + secret + strings.Repeat(" words", 20<<10) + `"}]}`
	tests := []struct {
		name     string
		body     string
		keys     bool
		warmConn bool // a first request leaves a kept-alive connection to the bad replica
	}{
		{"small body", small, false, false},
		{"small body on a kept-alive connection", small, false, true},
		{"large body (net/http's Transport)", large, false, false},
		{"with a key", small, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := startReplica(t, "m", "bad", nil)
			good := startReplica(t, "m", "good", func(c *fakeengine.Config) { c.MaxModelLen = 1 << 24 })
			spare := good.instance()
			spare.Weight = 0 // taken only when "bad" cannot be
			var logs syncbuf.Buffer
			o := Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))}
			var tg *testGateway
			key := ""
			if tt.keys {
				key = "sk-alice"
				tg = startKeyGateway(t, keyBlock("alice", key, ""), o, bad.instance(), spare)
			} else {
				tg = startGateway(t, o, bad.instance(), spare)
			}
			if tt.warmConn {
				if a := tg.do(t, "POST", "/v1/chat/completions", key, chat("m")); a.status != 200 || a.header.Get(ReplicaHeader) != "bad" {
					t.Fatalf("warm-up: %d from %q", a.status, a.header.Get(ReplicaHeader))
				}
			}
			before := bad.hits.Load()
			bad.mode.Store(modeReset)
			a := tg.do(t, "POST", "/v1/chat/completions", key, tt.body)
			if a.status != http.StatusBadGateway || decodeError(t, a.body).Error.Code != "replica_failed" {
				t.Fatalf("got %d %s; want 502 replica_failed", a.status, a.body)
			}
			if n := good.hits.Load(); n != 0 {
				t.Errorf("the other replica got %d requests; want none: the request is not retried", n)
			}
			if n := bad.hits.Load() - before; n < 1 {
				t.Errorf("the bad replica got %d requests; want the one that failed", n)
			}
			keyName := ""
			if tt.keys {
				keyName = "alice"
			}
			if got := testutil.ToFloat64(tg.m.poison.WithLabelValues("m", keyName, stageBeforeAnswer)); got != 1 {
				t.Errorf("llmgw_gateway_poison_requests_total{model=m,key=%q,stage=before_answer} = %v, want 1", keyName, got)
			}
			l := logs.String()
			want := []string{`"level":"WARN"`, `"msg":"replica failed after a request reached it; the request is not retried"`, `"model":"m"`, `"replica":"bad"`, `"key":"` + keyName + `"`}
			for _, w := range want {
				if !strings.Contains(l, w) {
					t.Errorf("log lacks %s:\n%s", w, l)
				}
			}
			if strings.Contains(l, secret) || strings.Contains(string(a.body), secret) {
				t.Errorf("the request's content was logged or echoed:\n%s", l)
			}
		})
	}

	t.Run("refused: never reached the replica, retried", func(t *testing.T) {
		bad := startReplica(t, "m", "bad", nil)
		bad.srv.Close()
		good := startReplica(t, "m", "good", nil)
		spare := good.instance()
		spare.Weight = 0
		tg := startGateway(t, Options{}, bad.instance(), spare)
		if a := tg.post(t, "/v1/chat/completions", small); a.status != 200 || a.header.Get(ReplicaHeader) != "good" {
			t.Fatalf("got %d from %q: %s", a.status, a.header.Get(ReplicaHeader), a.body)
		}
		if got := testutil.ToFloat64(tg.m.poison.WithLabelValues("m", "", stageBeforeAnswer)); got != 0 {
			t.Errorf("poison requests %v after a refused connection, want 0", got)
		}
	})
}

// A replica that failed mid-answer is counted as a poison request at
// mid_answer (TestNoRetryAfterFirstByte holds the answer the client gets).
func TestPoisonMidAnswerCounted(t *testing.T) {
	tg := startGateway(t, Options{}, halfStream(t))
	if a := tg.post(t, "/v1/chat/completions", chat("m")); !strings.Contains(string(a.body), "replica_failed") {
		t.Fatalf("got %d %s; want the stream ended with an error event", a.status, a.body)
	}
	if got := testutil.ToFloat64(tg.m.poison.WithLabelValues("m", "", stageMidAnswer)); got != 1 {
		t.Errorf("poison requests at mid_answer: %v, want 1", got)
	}
}

// A replica that does not answer within the response-header timeout is
// failing (its breaker counts it), but the request reached it: it is not
// tried on another replica, and is answered 504.
func TestReplicaTimeoutNotRetried(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	good := startReplica(t, "m", "good", nil)
	spare := good.instance()
	spare.Weight = 0
	tg := startGateway(t, Options{Upstream: NewUpstream(DefaultDialTimeout, 50*time.Millisecond), Breaker: BreakerConfig{Failures: 1}},
		Instance{ID: "slow", Model: "m", Replica: "slow", Address: strings.TrimPrefix(slow.URL, "http://"), Weight: 1}, spare)
	a := tg.post(t, "/v1/chat/completions", chat("m"))
	if a.status != http.StatusGatewayTimeout || decodeError(t, a.body).Error.Code != "replica_timeout" {
		t.Fatalf("got %d %s; want 504 replica_timeout", a.status, a.body)
	}
	if n := good.hits.Load(); n != 0 {
		t.Errorf("the other replica got %d requests; want none", n)
	}
	if got := tg.breakerState("slow"); got != BreakerOpen {
		t.Errorf("the slow replica's breaker is %v; a timeout is its failure (want open at 1 failure)", got)
	}
	if got := testutil.ToFloat64(tg.m.poison.WithLabelValues("m", "", stageBeforeAnswer)); got != 0 {
		t.Errorf("poison requests %v after a timeout, want 0", got)
	}
}

// A flood of requests the gateway refuses (malformed, too deep, with a
// query string) and of well-formed ones the engine refuses (400) or fails
// (500) leaves every breaker closed, and every legitimate request among
// them is answered.
func TestBreakersClientsCannotTrip(t *testing.T) {
	var insts []Instance
	for _, id := range []string{"a", "b", "c"} {
		insts = append(insts, startEngine(t, id, "m", func(w http.ResponseWriter, _ *http.Request, body []byte) bool {
			switch {
			case bytes.Contains(body, []byte("engine-500")):
				http.Error(w, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
			case bytes.Contains(body, []byte("engine-400")):
				http.Error(w, `{"error":{"message":"bad"}}`, http.StatusBadRequest)
			default:
				return false
			}
			return true
		}))
	}
	tg := startGateway(t, Options{}, insts...)
	hostile := []struct {
		path, body string
		status     int
	}{
		{"/v1/chat/completions", `{"model":"m","messages":[`, 400},
		{"/v1/chat/completions", `{"model":"m","x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, 400},
		{"/v1/chat/completions?" + strings.Repeat("q", 16<<10), chat("m"), 400},
		{"/v1/completions", `{"model":"m","prompt":"x"}}`, 400},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"engine-500"}]}`, 500},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"engine-400"}]}`, 400},
	}
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for w := range 4 {
		wg.Go(func() {
			for i := range 15 {
				h := hostile[(w+i)%len(hostile)]
				req, _ := http.NewRequest(http.MethodPost, tg.srv.URL+h.path, strings.NewReader(h.body))
				resp, err := tg.client.Do(req)
				if err != nil {
					errs <- fmt.Errorf("hostile %s: %w", h.path[:min(len(h.path), 40)], err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != h.status {
					errs <- fmt.Errorf("hostile %.60s: %d, want %d", h.body, resp.StatusCode, h.status)
				}
				// Legitimate traffic beside it.
				a := tg.post(t, "/v1/chat/completions", chat("m"))
				if a.status != 200 {
					errs <- fmt.Errorf("legitimate request: %d %s", a.status, a.body)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if got := tg.breakerState(id); got != BreakerClosed {
			t.Errorf("breaker of %s: %v; want closed", id, got)
		}
		if tg.tbl.Load().byID[id].br.failing.Load() {
			t.Errorf("breaker of %s counts failures; want none", id)
		}
	}
}

// rawAnswer is one answer read off a raw connection.
type rawAnswer struct {
	status int
	close  bool // Connection: close
	body   string
}

// rawExchange writes req on a new connection to srv and reads the
// answers that come back until the connection ends.
func rawExchange(t *testing.T, addr net.Addr, req string) []rawAnswer {
	t.Helper()
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait.Timeout))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []rawAnswer
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the connection stayed open %s after %d answers", wait.Timeout, len(out))
			}
			return out
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		out = append(out, rawAnswer{resp.StatusCode, resp.Close, string(b)})
	}
}

// A request with both Content-Length and Transfer-Encoding is answered,
// and its connection closed: a request pipelined behind it gets no answer
// (RFC 9112 §6.3). The same pipeline with Content-Length alone gets both.
func TestContentLengthWithTransferEncodingClosed(t *testing.T) {
	a := startReplica(t, "m", "a", nil)
	tg := startGateway(t, Options{}, a.instance())
	body := chat("m")
	next := "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"

	both := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), len(body), body) + next
	got := rawExchange(t, tg.srv.Listener.Addr(), both)
	if len(got) != 1 || got[0].status != 200 || !got[0].close {
		t.Errorf("Content-Length with Transfer-Encoding: %d answers (%v); want one 200, with Connection: close", len(got), statuses(got))
	}
	// The other order: the Content-Length after Transfer-Encoding does
	// not take over the framing.
	teFirst := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), len(body), body) + next
	if got := rawExchange(t, tg.srv.Listener.Addr(), teFirst); len(got) != 1 || got[0].status != 200 || !got[0].close {
		t.Errorf("Transfer-Encoding with Content-Length: %d answers (%v); want one 200, with Connection: close", len(got), statuses(got))
	}

	plain := fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body) + next + "GET /healthz HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
	if got := rawExchange(t, tg.srv.Listener.Addr(), plain); len(got) != 3 || got[0].status != 200 || got[0].close {
		t.Errorf("Content-Length alone, pipelined: %d answers (%v); want 3, the first kept alive", len(got), statuses(got))
	}
}

func statuses(rs []rawAnswer) []int {
	var s []int
	for _, r := range rs {
		s = append(s, r.status)
	}
	return s
}

// A body that does not arrive whole within the body-read timeout is cut:
// 408 and the connection closed, and no replica sees the request.
func TestBodyReadTimeout(t *testing.T) {
	a := startReplica(t, "m", "a", nil)
	tg := startGateway(t, Options{BodyReadTimeout: 100 * time.Millisecond}, a.instance())
	// The body stops after 13 of its 100 bytes.
	got := rawExchange(t, tg.srv.Listener.Addr(), "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\n{\"model\":\"m\",")
	if len(got) != 1 || got[0].status != http.StatusRequestTimeout || !got[0].close {
		t.Fatalf("answers %v; want one 408 with Connection: close", statuses(got))
	}
	if !strings.Contains(got[0].body, "body_read_timeout") {
		t.Errorf("408 body %s; want it to name body_read_timeout", got[0].body)
	}
	if n := a.hits.Load(); n != 0 {
		t.Errorf("the replica got %d requests; want none", n)
	}
}

// Every route of NewFastServer's server reads its body under a deadline:
// the one its BodyTimeouts give its path.
func TestServerBodyDeadline(t *testing.T) {
	readErr := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
	})
	var asked sync.Map
	srv := serveGateway(t, h, func(path string) (time.Duration, string) {
		asked.Store(path, true)
		return 100 * time.Millisecond, ""
	})
	// The first 3 bytes come with the headers; the rest never does:
	// fasthttp's read ahead of the handler meets the deadline.
	got := rawExchange(t, srv.Listener.Addr(), "POST /other HTTP/1.1\r\nHost: gw\r\nContent-Length: 100\r\n\r\nabc")
	if len(got) != 1 || got[0].status != http.StatusRequestTimeout || !got[0].close {
		t.Errorf("answers %v; want one 408, the connection closed", statuses(got))
	}
	if _, ok := asked.Load("/other"); !ok {
		t.Errorf("the deadline was not asked for /other")
	}
	// Past what fasthttp reads ahead (8 KiB), the handler's own read
	// meets it.
	rawExchange(t, srv.Listener.Addr(), "POST /other HTTP/1.1\r\nHost: gw\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("a", 9000))
	select {
	case err := <-readErr:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("reading a body that stopped: %v; want the deadline", err)
		}
	case <-time.After(wait.Timeout):
		t.Fatal("the handler's read of a stalled body never ended")
	}
}

// An answer of known length, held whole by fasthttp's server, reaches the
// client whole with its Content-Length, a small one or a large one.
func TestLargeAnswerWhole(t *testing.T) {
	for _, n := range []int{100, 200 << 10} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			answer := `{"object":"list","data":"` + strings.Repeat("x", n) + `"}`
			eng := startEngine(t, "a", "m", func(w http.ResponseWriter, _ *http.Request, _ []byte) bool {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
				_, _ = io.WriteString(w, answer)
				return true
			})
			tg := startGateway(t, Options{}, eng)
			req, _ := http.NewRequest(http.MethodPost, tg.srv.URL+"/v1/embeddings", strings.NewReader(`{"model":"m","input":"x"}`))
			resp, err := tg.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 200 || string(b) != answer || resp.ContentLength != int64(len(answer)) {
				t.Errorf("%d, Content-Length %d, %d bytes (%v); want 200 and the %d bytes whole", resp.StatusCode, resp.ContentLength, len(b), err, len(answer))
			}
		})
	}
}

// The body-read deadline ends with the body: an answer that streams for
// longer than it is not cut.
func TestStreamOutlivesBodyReadTimeout(t *testing.T) {
	a := startReplica(t, "m", "a", func(c *fakeengine.Config) { c.TokensPerSecond = 40 })
	tg := startGateway(t, Options{BodyReadTimeout: 50 * time.Millisecond}, a.instance())
	got := tg.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":12,"stream":true}`)
	if got.status != 200 || !strings.Contains(string(got.body), "data: [DONE]") {
		t.Errorf("stream: %d, %q; want it whole, to [DONE]", got.status, got.body)
	}
}

// CORS is the gateway's: by default no web page may use it (a request or
// preflight with an Origin is refused), and the engine's Access-Control-*
// headers never pass through; an allowed origin gets its preflight
// answered and its requests answered with the gateway's own headers.
func TestCORS(t *testing.T) {
	eng := startEngine(t, "a", "m", func(w http.ResponseWriter, _ *http.Request, _ []byte) bool {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Access-Control-Allow-Credentials", "true")
		return false
	})
	send := func(tg *testGateway, method, origin string, hdr map[string]string) answer {
		req, _ := http.NewRequest(method, tg.srv.URL+"/v1/chat/completions", strings.NewReader(chat("m")))
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := tg.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header, b}
	}
	preflight := map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"}

	t.Run("default: none", func(t *testing.T) {
		tg := startGateway(t, Options{}, eng)
		if a := send(tg, "POST", "", nil); a.status != 200 || a.header.Get("Access-Control-Allow-Origin") != "" || a.header.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("no Origin: %d, CORS headers %v; want 200 and none of the engine's", a.status, a.header)
		}
		if a := send(tg, "POST", "https://evil.example", nil); a.status != 403 || a.header.Get("Access-Control-Allow-Origin") != "" || decodeError(t, a.body).Error.Code != "origin_not_allowed" {
			t.Errorf("Origin: %d %s; want 403 origin_not_allowed without Access-Control-Allow-Origin", a.status, a.body)
		}
		if a := send(tg, "OPTIONS", "https://evil.example", preflight); a.status != 403 || a.header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("preflight: %d %v; want 403 without Access-Control-Allow-Origin", a.status, a.header)
		}
	})

	t.Run("allowed origin", func(t *testing.T) {
		tg := startGateway(t, Options{CORSOrigins: []string{"https://chat.example.com"}}, eng)
		a := send(tg, "OPTIONS", "https://chat.example.com", preflight)
		if a.status != http.StatusNoContent || a.header.Get("Access-Control-Allow-Origin") != "https://chat.example.com" ||
			a.header.Get("Access-Control-Allow-Methods") != "GET, POST" || a.header.Get("Access-Control-Allow-Headers") != "authorization, content-type, x-stainless-os" ||
			a.header.Get("Access-Control-Max-Age") != "600" {
			t.Errorf("preflight: %d %v; want 204 with the policy's headers", a.status, a.header)
		}
		a = send(tg, "POST", "https://chat.example.com", nil)
		if a.status != 200 || a.header.Values("Access-Control-Allow-Origin")[0] != "https://chat.example.com" || len(a.header.Values("Access-Control-Allow-Origin")) != 1 ||
			a.header.Get("Access-Control-Allow-Credentials") != "" || !strings.Contains(a.header.Get("Vary"), "Origin") {
			t.Errorf("request: %d %v; want 200 with the gateway's Access-Control-Allow-Origin only", a.status, a.header)
		}
		if a := send(tg, "POST", "https://other.example.com", nil); a.status != 403 {
			t.Errorf("another origin: %d; want 403", a.status)
		}
	})

	t.Run("any origin", func(t *testing.T) {
		tg := startGateway(t, Options{CORSOrigins: []string{"*"}}, eng)
		if a := send(tg, "POST", "https://anywhere.example", nil); a.status != 200 || a.header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("request: %d %v; want 200 with Access-Control-Allow-Origin: *", a.status, a.header)
		}
	})
}

// A preflight's requested headers are reflected only when they are
// header names.
func TestHeaderList(t *testing.T) {
	for _, tt := range []struct {
		vals []string
		want bool
	}{
		{[]string{"authorization, content-type"}, true},
		{[]string{"x-stainless-os", "x-stainless-arch"}, true},
		{[]string{"authorization,"}, false},
		{[]string{"bad header"}, false},
		{[]string{"x\r\nSet-Cookie: a=b"}, false},
	} {
		if got := headerList(tt.vals); got != tt.want {
			t.Errorf("headerList(%q) = %v, want %v", tt.vals, got, tt.want)
		}
	}
}
