// Package hostile is the hostile-input suite (issue 34): every class of
// input a hostile client was seen to use against the controller and the
// gateway, each sent while legitimate traffic runs beside it, and the
// goals checked after each class: no process died (the controller, the
// gateway and every engine), every legitimate request was answered, every
// circuit breaker is closed, and neither the controller nor the gateway
// grew by more than 64 MB per hostile request in flight.
//
// Run drives the classes against Targets; hostile_test.go runs it in CI
// (llama.cpp's real server behind the gateway, the controller against the
// fake Nomad) and e2e/hostile_test.go by hand against a real Nomad. Every
// loop is bounded in count and time, and every address is loopback.
package hostile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/llmgw/llmgw/internal/blockingquery"
)

// Targets are the processes under attack.
type Targets struct {
	// Controller is the controller's base URL, Token its API token.
	Controller, Token string
	// Gateway is the gateway's base URL, Model a model it serves.
	Gateway, Model string
	// Node is a node the controller knows (for the labels calls), and
	// HoldDomain a domain of the facility (for the holds calls: a hold
	// without drain, set and released).
	Node, HoldDomain string
	// Pids are the processes that must live, by name: "controller",
	// "gateway" and one per engine. Memory is measured for the first two.
	Pids map[string]int
}

// Result is what one class did and what it left.
type Result struct {
	Class, Target string
	// Sent is the hostile requests (or connections) sent; Answers counts
	// their answers by status ("closed" for a connection the server cut).
	Sent    int
	Answers map[string]int
	// InFlight is the most hostile requests in flight at once.
	InFlight int
	// LegitOK of LegitSent legitimate requests were answered 200.
	LegitOK, LegitSent int
	// Dead names the processes that died; Open the breakers not closed.
	Dead, Open []string
	// GrowthMB is each process's peak resident memory during the class
	// less its resident memory before it, in MB (the goal holds the
	// controller's and the gateway's; the engines' is reported).
	GrowthMB map[string]float64
	// Problems are the class's own checks that failed (an answer it must
	// not get).
	Problems []string
}

// Class is one kind of hostile input.
type Class struct {
	Name, Target string // Target: "controller" or "gateway"
	// InFlight is the most requests it has in flight at once.
	InFlight int
	run      func(ctx context.Context, tg Targets, r *Result)
}

// MaxGrowthMB is the goal: resident memory growth per hostile request in
// flight.
const MaxGrowthMB = 64

// client has timeouts so that no class waits forever on a stuck server.
var client = &http.Client{Timeout: 60 * time.Second}

func (r *Result) answer(key string) {
	if r.Answers == nil {
		r.Answers = map[string]int{}
	}
	r.Answers[key]++
	r.Sent++
}

func (r *Result) problemf(format string, args ...any) {
	if len(r.Problems) < 5 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// do sends one request and records its answer; want is the status
// classes it may get (e.g. "4xx").
func do(r *Result, method, u, token string, body io.Reader, header map[string]string, want ...string) {
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		r.problemf("%s %s: %v", method, u, err)
		return
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		r.answer("closed")
		if !slices.Contains(want, "closed") {
			r.problemf("%s %s: %v", method, short(u), err)
		}
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	code := strconv.Itoa(resp.StatusCode)
	r.answer(code)
	if !slices.Contains(want, code) && !slices.Contains(want, code[:1]+"xx") {
		r.problemf("%s %s: %s, want %v", method, short(u), resp.Status, want)
	}
}

func short(u string) string {
	if len(u) > 80 {
		return u[:80] + "…"
	}
	return u
}

func chat(model string) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":4}`, model)
}

// nested is a JSON object whose "messages" nest n arrays deep.
func nested(model string, n int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"model":%q,"messages":`, model)
	b.WriteString(strings.Repeat("[", n))
	b.WriteString(strings.Repeat("]", n))
	b.WriteString("}")
	return b.Bytes()
}

// big is a well-formed JSON body of about n bytes.
func big(model string, n int) []byte {
	return fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":"%s"}]}`, model, strings.Repeat("a", n))
}

// writes are the controller's write calls, with a body each accepts in
// shape.
func writes(tg Targets) []struct{ method, path string } {
	return []struct{ method, path string }{
		{http.MethodPost, "/v1/plan"},
		{http.MethodPost, "/v1/reload"},
		{http.MethodPut, "/v1/facility/holds/" + url.PathEscape(tg.HoldDomain)},
		{http.MethodPut, "/v1/nodes/" + url.PathEscape(tg.Node) + "/labels"},
		{http.MethodPut, "/v1/models/" + url.PathEscape(tg.Model) + "/pin"},
	}
}

// Classes are every class of the issue, in its order.
func Classes() []Class {
	return []Class{
		{Name: "plan: catalog of 200 KB nested brackets", Target: "controller", InFlight: 1, run: func(ctx context.Context, tg Targets, r *Result) {
			cat := `model "x" { source = "a/b"` + "\n  replicas = " + strings.Repeat("[", 200_000) + "\n}\n"
			body, _ := json.Marshal(map[string]string{"catalog": cat})
			for range 3 {
				do(r, http.MethodPost, tg.Controller+"/v1/plan", tg.Token, bytes.NewReader(body), nil, "4xx")
			}
			fac := strings.Repeat("{", 200_000)
			body, _ = json.Marshal(map[string]string{"facility": fac, "facility_name": "facility.json"})
			do(r, http.MethodPost, tg.Controller+"/v1/plan", tg.Token, bytes.NewReader(body), nil, "4xx")
		}},
		{Name: "every write: 4 MB of nested JSON", Target: "controller", InFlight: 1, run: func(ctx context.Context, tg Targets, r *Result) {
			body := bytes.Repeat([]byte("["), 4<<20)
			for _, w := range writes(tg) {
				do(r, w.method, tg.Controller+w.path, tg.Token, bytes.NewReader(body), nil, "4xx", "closed")
			}
		}},
		{Name: "plan: 3,000 models × 1,000 replicas", Target: "controller", InFlight: 1, run: func(ctx context.Context, tg Targets, r *Result) {
			var b strings.Builder
			for i := range 3000 {
				fmt.Fprintf(&b, "model \"m%d\" {\n  source = \"o/m%d\"\n  replicas = 1000\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"NVIDIA H200\"\n    gpus = 1\n  }\n}\n", i, i)
			}
			body, _ := json.Marshal(map[string]string{"catalog": b.String()})
			do(r, http.MethodPost, tg.Controller+"/v1/plan", tg.Token, bytes.NewReader(body), nil, "4xx", "200")
		}},
		{Name: "every write: 50 MB bodies, 4 at once", Target: "controller", InFlight: 4, run: func(ctx context.Context, tg Targets, r *Result) {
			body := big(tg.Model, 50<<20)
			var mu sync.Mutex
			var wg sync.WaitGroup
			for _, w := range writes(tg)[:4] {
				wg.Go(func() {
					var one Result
					do(&one, w.method, tg.Controller+w.path, tg.Token, bytes.NewReader(body), nil, "4xx", "closed")
					mu.Lock()
					r.merge(&one)
					mu.Unlock()
				})
			}
			wg.Wait()
		}},
		{Name: "writes without a token, or with another's X-LLMGW-User", Target: "controller", InFlight: 1, run: func(ctx context.Context, tg Targets, r *Result) {
			for _, w := range writes(tg) {
				do(r, w.method, tg.Controller+w.path, "", strings.NewReader(`{}`), nil, "401")
			}
			do(r, http.MethodPut, tg.Controller+"/v1/facility/holds/"+url.PathEscape(tg.HoldDomain), tg.Token, strings.NewReader(`{"reason":"suite"}`),
				map[string]string{"X-LLMGW-User": "admin"}, "2xx")
			resp, err := authGet(tg.Controller+"/v1/facility", tg.Token)
			switch {
			case err != nil:
				r.problemf("GET /v1/facility: %v", err)
			case strings.Contains(resp, `"admin"`):
				r.problemf("a hold's set_by came from the X-LLMGW-User header")
			}
			do(r, http.MethodDelete, tg.Controller+"/v1/facility/holds/"+url.PathEscape(tg.HoldDomain), tg.Token, nil, nil, "2xx")
		}},
		{Name: "labels: newline, ESC, NUL; base_watts = \"abc\"", Target: "controller", InFlight: 1, run: func(ctx context.Context, tg Targets, r *Result) {
			for _, set := range []map[string]string{
				{"rack": "r1\nx"}, {"rack": "r1\x1b[31m"}, {"rack": "r1\x00"}, {"base_watts": "abc"}, {"hcas": "mlx5_0,\x1b[0m"},
				{"pdu": strings.Repeat("p", 300)},
			} {
				body, _ := json.Marshal(map[string]any{"set": set})
				do(r, http.MethodPut, tg.Controller+"/v1/nodes/"+url.PathEscape(tg.Node)+"/labels", tg.Token, bytes.NewReader(body), nil, "400")
			}
		}},
		{Name: "a body sent one byte every 3 s", Target: "controller", InFlight: 1, run: func(ctx context.Context, tg Targets, r *Result) {
			trickle(ctx, r, tg.Controller, "POST /v1/plan HTTP/1.1\r\nHost: c\r\nAuthorization: Bearer "+tg.Token+"\r\nContent-Length: 1000\r\n\r\n")
		}},
		{Name: "every OpenAI route: 4 MB and 2 kB of nested JSON", Target: "gateway", InFlight: 1, run: func(ctx context.Context, tg Targets, r *Result) {
			for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"} {
				for _, n := range []int{2 << 20, 1000} {
					do(r, http.MethodPost, tg.Gateway+path, "", bytes.NewReader(nested(tg.Model, n)), nil, "4xx")
				}
			}
		}},
		{Name: "chat: malformed JSON, 200 in bursts of 20", Target: "gateway", InFlight: 20, run: func(ctx context.Context, tg Targets, r *Result) {
			bad := []string{
				fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}`, tg.Model),
				fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],}`, tg.Model),
				fmt.Sprintf(`{"model":%q,"messages":"\x01"}`, tg.Model),
				fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"\ud800"}]} trailing`, tg.Model),
			}
			var mu sync.Mutex
			for burst := range 10 {
				var wg sync.WaitGroup
				for i := range 20 {
					wg.Go(func() {
						var one Result
						do(&one, http.MethodPost, tg.Gateway+"/v1/chat/completions", "", strings.NewReader(bad[(burst+i)%len(bad)]), nil, "4xx")
						mu.Lock()
						r.merge(&one)
						mu.Unlock()
					})
				}
				wg.Wait()
				if !blockingquery.Sleep(ctx, 300*time.Millisecond) {
					return
				}
			}
		}},
		{Name: "chat: a 100 KB query string", Target: "gateway", InFlight: 1, run: func(ctx context.Context, tg Targets, r *Result) {
			q := "?x=" + strings.Repeat("a", 100<<10)
			for range 20 {
				do(r, http.MethodPost, tg.Gateway+"/v1/chat/completions"+q, "", strings.NewReader(chat(tg.Model)), nil, "4xx")
			}
		}},
		{Name: "chat: Content-Length with Transfer-Encoding, pipelined", Target: "gateway", InFlight: 1, run: func(ctx context.Context, tg Targets, r *Result) {
			smuggle(r, tg)
		}},
		{Name: "chat: 50 MB bodies, 4 at once", Target: "gateway", InFlight: 4, run: func(ctx context.Context, tg Targets, r *Result) {
			body := big(tg.Model, 50<<20)
			var mu sync.Mutex
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					var one Result
					do(&one, http.MethodPost, tg.Gateway+"/v1/chat/completions", "", bytes.NewReader(body), nil, "413", "closed")
					mu.Lock()
					r.merge(&one)
					mu.Unlock()
				})
			}
			wg.Wait()
		}},
		{Name: "chat: a body sent one byte every 3 s", Target: "gateway", InFlight: 1, run: func(ctx context.Context, tg Targets, r *Result) {
			trickle(ctx, r, tg.Gateway, "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
		}},
		{Name: "cross-origin use and preflight", Target: "gateway", InFlight: 1, run: func(ctx context.Context, tg Targets, r *Result) {
			h := map[string]string{"Origin": "https://evil.example", "Content-Type": "application/json"}
			for _, m := range []string{http.MethodPost, http.MethodOptions} {
				var body io.Reader
				if m == http.MethodPost {
					body = strings.NewReader(chat(tg.Model))
				}
				req, _ := http.NewRequest(m, tg.Gateway+"/v1/chat/completions", body)
				for k, v := range h {
					req.Header.Set(k, v)
				}
				req.Header.Set("Access-Control-Request-Method", "POST")
				resp, err := client.Do(req)
				if err != nil {
					r.answer("closed")
					r.problemf("%s with Origin: %v", m, err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				r.answer(strconv.Itoa(resp.StatusCode))
				if a := resp.Header.Get("Access-Control-Allow-Origin"); a != "" {
					r.problemf("%s with a foreign Origin: Access-Control-Allow-Origin %q", m, a)
				}
				if resp.StatusCode == http.StatusMethodNotAllowed {
					r.problemf("%s: 405", m)
				}
			}
		}},
		{Name: "1 MB of headers; headers sent slowly", Target: "gateway", InFlight: 1, run: func(ctx context.Context, tg Targets, r *Result) {
			do(r, http.MethodPost, tg.Gateway+"/v1/chat/completions", "", strings.NewReader(chat(tg.Model)),
				map[string]string{"X-Big": strings.Repeat("b", 1<<20)}, "431", "400", "closed")
			u, _ := url.Parse(tg.Gateway)
			c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
			if err != nil {
				r.problemf("dial: %v", err)
				return
			}
			defer func() { _ = c.Close() }()
			// Two bytes of a request line, then nothing: the server must
			// answer or close after its read-header timeout (net/http
			// answers 400 and closes).
			_, _ = c.Write([]byte("PO"))
			awaitAnswer(r, c, 90*time.Second, "a connection with half a request line was still open after 90 s")
		}},
	}
}

func (r *Result) merge(o *Result) {
	r.Sent += o.Sent
	for k, v := range o.Answers {
		if r.Answers == nil {
			r.Answers = map[string]int{}
		}
		r.Answers[k] += v
	}
	for _, p := range o.Problems {
		r.problemf("%s", p)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return err != nil && errors.As(err, &ne) && ne.Timeout()
}

// trickle sends head, then a body byte every 3 s, and checks that the
// server cuts the connection (or answers) within 3 minutes: the body-read
// timeout of the server, not the client's patience, must end it.
func trickle(ctx context.Context, r *Result, base, head string) {
	u, _ := url.Parse(base)
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		r.problemf("dial: %v", err)
		return
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Write([]byte(head)); err != nil {
		r.problemf("write: %v", err)
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		awaitAnswer(r, c, 3*time.Minute, "a body sent one byte every 3 s was still read after 3 minutes")
	}()
	t := time.NewTicker(3 * time.Second)
	defer t.Stop()
	for i := 0; i < 60; i++ {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := c.Write([]byte("{")); err != nil {
				<-done
				return
			}
		}
	}
	<-done
}

// awaitAnswer waits up to wait for the server to answer on c, or to close
// it, and records which; still open after wait is the problem held.
func awaitAnswer(r *Result, c net.Conn, wait time.Duration, held string) {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	switch {
	case err == nil:
		_ = resp.Body.Close()
		r.answer(strconv.Itoa(resp.StatusCode))
	case isTimeout(err):
		r.answer("held")
		r.problemf("%s", held)
	default:
		r.answer("closed")
	}
}

// smuggle sends a request with both Content-Length and Transfer-Encoding
// and a second request pipelined behind it: the server must not answer
// the second on that connection (RFC 9112 section 6.3: close it).
func smuggle(r *Result, tg Targets) {
	u, _ := url.Parse(tg.Gateway)
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		r.problemf("dial: %v", err)
		return
	}
	defer func() { _ = c.Close() }()
	body := chat(tg.Model)
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	first := "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(chunked)) + "\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
	second := "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := c.Write([]byte(first + second)); err != nil {
		r.problemf("write: %v", err)
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(90 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		r.answer("closed")
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	r.answer(strconv.Itoa(resp.StatusCode))
	if resp2, err := http.ReadResponse(br, nil); err == nil {
		_ = resp2.Body.Close()
		r.answer("second " + strconv.Itoa(resp2.StatusCode))
		r.problemf("the pipelined request behind Content-Length with Transfer-Encoding was answered (%s)", resp2.Status)
	} else if isTimeout(err) {
		r.problemf("the connection stayed open after the answer")
	}
}

func authGet(u, token string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), err
}

// legit sends a chat completion through the gateway and a model list read
// to the controller every 200 ms until ctx ends (at most 3,000 of each),
// and counts what was answered 200.
func legit(ctx context.Context, tg Targets, ok, sent *atomic.Int64) {
	for i := 0; i < 3000 && ctx.Err() == nil; i++ {
		resp, err := client.Post(tg.Gateway+"/v1/chat/completions", "application/json", strings.NewReader(chat(tg.Model)))
		sent.Add(1)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ok.Add(1)
			}
		}
		if tg.Controller != "" {
			_, err := authGet(tg.Controller+"/v1/models", tg.Token)
			sent.Add(1)
			if err == nil {
				ok.Add(1)
			}
		}
		if !blockingquery.Sleep(ctx, 200*time.Millisecond) {
			return
		}
	}
}

// Run runs each class with legitimate traffic beside it and returns what
// each did and left. Nothing here fails t: the caller checks the results
// (Check), so that one run reports every class.
func Run(t testing.TB, tg Targets, classes []Class) []Result {
	var out []Result
	for _, c := range classes {
		if (c.Target == "controller" && tg.Controller == "") || (c.Target == "gateway" && tg.Gateway == "") {
			continue
		}
		r := Result{Class: c.Name, Target: c.Target, InFlight: c.InFlight}
		before := map[string]int64{}
		for name, pid := range tg.Pids {
			before[name] = rss(pid, "VmRSS")
			// Writing 5 resets the peak (VmHWM) to the current size.
			_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		var ok, sent atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() { legit(ctx, tg, &ok, &sent) })
		c.run(ctx, tg, &r)
		// A little legitimate traffic after the class too: what it left
		// must serve.
		blockingquery.Sleep(ctx, time.Second)
		cancel()
		wg.Wait()
		r.LegitOK, r.LegitSent = int(ok.Load()), int(sent.Load())
		r.GrowthMB = map[string]float64{}
		for name, b := range before {
			r.GrowthMB[name] = float64(rss(tg.Pids[name], "VmHWM")-b) / 1e6
		}
		for _, name := range slices.Sorted(maps.Keys(tg.Pids)) {
			if !alive(tg.Pids[name]) {
				r.Dead = append(r.Dead, name)
			}
		}
		r.Open = openBreakers(tg.Gateway)
		t.Logf("%s: %s", c.Name, r.Line())
		out = append(out, r)
	}
	return out
}

// Check fails t for every goal a result missed.
func Check(t testing.TB, results []Result) {
	t.Helper()
	for _, r := range results {
		if len(r.Dead) > 0 {
			t.Errorf("%s: died: %v", r.Class, r.Dead)
		}
		if r.LegitOK != r.LegitSent {
			t.Errorf("%s: %d of %d legitimate requests answered", r.Class, r.LegitOK, r.LegitSent)
		}
		if len(r.Open) > 0 {
			t.Errorf("%s: breakers not closed: %v", r.Class, r.Open)
		}
		for _, name := range []string{"controller", "gateway"} {
			if g := r.GrowthMB[name]; g/float64(max(r.InFlight, 1)) > MaxGrowthMB {
				t.Errorf("%s: %s grew %.0f MB with %d in flight (goal: %d MB each)", r.Class, name, g, r.InFlight, MaxGrowthMB)
			}
		}
		for _, p := range r.Problems {
			t.Errorf("%s: %s", r.Class, p)
		}
	}
}

// Report logs the results' table, writes it to the file HOSTILE_TABLE
// names (when set), and checks the goals (Check).
func Report(t testing.TB, results []Result) {
	t.Helper()
	table := Table(results)
	t.Logf("results:\n%s", table)
	if f := os.Getenv("HOSTILE_TABLE"); f != "" {
		if err := os.WriteFile(f, []byte(table), 0o644); err != nil { //nolint:gosec // a table for docs
			t.Error(err)
		}
	}
	Check(t, results)
}

// Line is the result in one line.
func (r Result) Line() string {
	return fmt.Sprintf("sent %d %v; legit %d/%d; dead %v; open %v; growth MB %v; problems %v",
		r.Sent, r.Answers, r.LegitOK, r.LegitSent, r.Dead, r.Open, r.GrowthMB, r.Problems)
}

// Table is the results as a Markdown table (docs/reliability.md).
func Table(results []Result) string {
	var b strings.Builder
	b.WriteString("| class | part | hostile sent: answers | legitimate answered | died | breakers open | peak growth MB: controller / gateway / engines (largest) |\n|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		var ans []string
		for _, k := range slices.Sorted(maps.Keys(r.Answers)) {
			ans = append(ans, fmt.Sprintf("%s×%d", k, r.Answers[k]))
		}
		engines := 0.0
		for name, g := range r.GrowthMB {
			if name != "controller" && name != "gateway" {
				engines = max(engines, g)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %d: %s | %d/%d | %d | %d | %.1f / %.1f / %.1f |\n", r.Class, r.Target, r.Sent, strings.Join(ans, " "),
			r.LegitOK, r.LegitSent, len(r.Dead), len(r.Open), max(r.GrowthMB["controller"], 0), max(r.GrowthMB["gateway"], 0), max(engines, 0))
	}
	return b.String()
}

// rss is a field of /proc/<pid>/status in bytes (VmRSS, VmHWM); 0 when
// unreadable.
func rss(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// alive reports whether pid runs and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// openBreakers names the gateway's endpoints whose breaker is not closed
// (llmgw_gateway_breaker_state > 0).
func openBreakers(gw string) []string {
	if gw == "" {
		return nil
	}
	resp, err := client.Get(gw + "/metrics")
	if err != nil {
		return []string{"metrics: " + err.Error()}
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return []string{"metrics: " + err.Error()}
	}
	var open []string
	if f := fams["llmgw_gateway_breaker_state"]; f != nil {
		for _, m := range f.GetMetric() {
			if m.GetGauge().GetValue() > 0 {
				var labels []string
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				open = append(open, strings.Join(labels, ","))
			}
		}
	}
	return open
}
