package controller

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/bounded"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// boundsCatalog is a catalog of models models, each asking for replicas
// replicas (or, autoscaled, between 1 and replicas) on profiles profiles
// of gpus GPUs each, padded with comment lines to about pad bytes.
func boundsCatalog(models, replicas, profiles, gpus int, autoscaled bool, pad int) string {
	var b strings.Builder
	for m := range models {
		fmt.Fprintf(&b, "model \"model-%04d\" {\n  source = \"org/model-%04d\"\n", m, m)
		if autoscaled {
			fmt.Fprintf(&b, "  autoscale {\n    min = 1\n    max = %d\n    target { outstanding_per_replica = 4 }\n  }\n", replicas)
		} else {
			fmt.Fprintf(&b, "  replicas = %d\n", replicas)
		}
		for p := range profiles {
			fmt.Fprintf(&b, "  profile \"p%d\" {\n    engine = \"vllm\"\n    gpu    = \"NVIDIA H200\"\n    gpus   = %d\n    watts  = %d\n  }\n", p, gpus, 500*gpus+p)
		}
		b.WriteString("}\n")
	}
	for line := strings.Repeat("#", 1000) + "\n"; b.Len()+len(line) < pad; {
		b.WriteString(line)
	}
	return b.String()
}

// boundsFacility has budgets budgets (on boundsFleet's PDUs, then on PDUs
// no node is in) and holds holds on PDUs no node is in.
func boundsFacility(budgets, holds int) string {
	var b strings.Builder
	b.WriteString("headroom = 0.05\n")
	for i := range budgets {
		fmt.Fprintf(&b, "budget \"pdu=p%05d\" { watts = 20000 }\n", i)
	}
	for i := range holds {
		fmt.Fprintf(&b, "hold \"pdu=h%05d\" {\n  reason = \"maintenance window %d\"\n}\n", i, i)
	}
	return b.String()
}

// planHeap is what planRequest measured of the heap, in bytes over the
// heap before the request (after a GC).
type planHeap struct {
	// peak is the highest HeapAlloc the sampler saw while the request ran:
	// live objects and garbage not yet collected.
	peak uint64
	// live is the highest live heap a finished GC cycle marked while the
	// request ran (runtime/metrics /gc/heap/live:bytes): what the request
	// held, whatever the collector's lag on a busy machine.
	live uint64
	// kept is what stayed after it (after a GC); allocated, the bytes
	// allocated in between.
	kept, allocated uint64
}

// planRequest sends body to c's POST /v1/plan in-process, measuring the
// heap (planHeap) with the collector's GOGC at gcPercent (0: as it is).
func planRequest(t *testing.T, h http.Handler, body []byte, gcPercent int) (*httptest.ResponseRecorder, planHeap) {
	t.Helper()
	var before, after runtime.MemStats
	if gcPercent != 0 {
		defer debug.SetGCPercent(debug.SetGCPercent(gcPercent))
	}
	liveNow := func() uint64 {
		s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
		rtmetrics.Read(s)
		return s[0].Value.Uint64()
	}
	runtime.GC()
	runtime.ReadMemStats(&before)
	liveBefore := liveNow()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var high, highLive uint64
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			high = max(high, m.HeapAlloc)
			highLive = max(highLive, liveNow())
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	rec := servePlan(h, body)
	close(stop)
	wg.Wait()
	runtime.ReadMemStats(&after)
	high = max(high, after.HeapAlloc)
	var ph planHeap
	ph.allocated = after.TotalAlloc - before.TotalAlloc
	runtime.GC()
	runtime.ReadMemStats(&after)
	if after.HeapAlloc > before.HeapAlloc {
		ph.kept = after.HeapAlloc - before.HeapAlloc
	}
	ph.peak = high - before.HeapAlloc
	if highLive > liveBefore {
		ph.live = highLive - liveBefore
	}
	return rec, ph
}

// boundsFleet is 1,000 nodes of 8 H200s, 10 to a rack, 2 to a PDU.
func boundsFleet() []ctlharness.Node {
	var nodes []ctlharness.Node
	for i := range 1000 {
		nodes = append(nodes, ctlharness.Node{Name: fmt.Sprintf("n%04d", i), Rack: fmt.Sprintf("r%03d", i/10), PDU: fmt.Sprintf("p%05d", i/2), GPUs: 8})
	}
	return nodes
}

// maxLiveGrowth bounds how much one plan may grow the controller's live
// heap: the Go runtime lets the heap grow to twice the live heap before it
// collects (GOGC=100), so a plan whose live heap grows at most 32 MB grows
// the controller by at most 64 MB.
const maxLiveGrowth = 32 << 20

// The largest plan the bounds allow — MaxPlanModels models asking for
// MaxPlanReplicas replicas over MaxPlanTries replica-profile pairs,
// MaxPlanBudgets budgets, MaxPlanHolds holds, a body just under its limit —
// on 1,000 nodes of 8 GPUs grows the controller's heap by at most 64 MB.
// The live heap is sampled while the request runs, as each GC cycle marks
// it (runtime/metrics /gc/heap/live:bytes), with the collector made eager
// (GOGC=5) so that cycles come often: HeapAlloc, sampled the same way, also
// counts the garbage a cycle has not reached yet: on a machine busy with
// other work it once read 33 MB against the 32 MB bound, where the same
// plan reads 21–25 MB on most runs. The answer is within its bound.
func TestPlanWithinBounds(t *testing.T) {
	e := newEnv(t, boundsFleet(), oneAlpha, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	// Replicas of 1 GPU all fit; of 8, most do not, and each keeps its
	// reasons.
	for _, gpus := range []int{1, 8} {
		t.Run(fmt.Sprintf("%d GPUs a replica", gpus), func(t *testing.T) { largestPlan(t, c, gpus) })
	}
}

func largestPlan(t *testing.T, c *ctl, gpus int) {

	var err error
	models, profiles := MaxPlanModels, MaxPlanTries/MaxPlanReplicas
	replicas := MaxPlanReplicas / models
	reqHolds := 50 // half the racks, held with drain
	var holds []controllerapi.PlanHold
	for i := range reqHolds {
		holds = append(holds, controllerapi.PlanHold{Domain: fmt.Sprintf("rack=r%03d", 2*i), Reason: "swap", Drain: true})
	}
	fac := boundsFacility(MaxPlanBudgets, MaxPlanHolds-reqHolds)
	// The catalog's padding fills what the rest leaves of the body (as
	// JSON, whose escapes make it longer than the HCL).
	var req controllerapi.PlanRequest
	var body []byte
	for room := maxPlanBody; ; {
		req = controllerapi.PlanRequest{Catalog: boundsCatalog(models, replicas, profiles, gpus, false, room), Facility: fac, Holds: holds}
		if body, err = json.Marshal(req); err != nil {
			t.Fatal(err)
		}
		if len(body) <= maxPlanBody {
			break
		}
		room -= len(body) - maxPlanBody
	}
	cat, err := facilityParse(req.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	fc, err := facilityParseFacility(req.Facility)
	if err != nil {
		t.Fatal(err)
	}
	// It is the largest: within every bound, and one replica more is not.
	if err := planBounds(cat, true, fc, true, len(holds)); err != nil {
		t.Fatalf("the largest plan is refused: %v", err)
	}
	cat.Models[0].Replicas++
	if err := planBounds(cat, true, fc, true, len(holds)); err == nil {
		t.Fatal("one replica more is not refused: the plan tested is not the largest")
	}
	if len(body) > maxPlanBody || len(body) < maxPlanBody*9/10 {
		t.Fatalf("body %d bytes, want just under %d", len(body), maxPlanBody)
	}

	rec, heap := planRequest(t, c.Handler(), body, 5)
	live, kept := heap.live, heap.kept
	if rec.Code != http.StatusOK {
		t.Fatalf("POST /v1/plan: %d %.500s", rec.Code, rec.Body)
	}
	var v controllerapi.PlanView
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	t.Logf("the largest plan: body %d kB, answer %d kB (%d creates, %d unplaced); live heap +%d MB at the most (HeapAlloc at GOGC=5 +%d MB), +%d MB after",
		len(body)>>10, rec.Body.Len()>>10, v.Creates, len(v.Unplaced), live>>20, heap.peak>>20, kept>>20)
	if v.Creates+len(v.Unplaced) < MaxPlanReplicas {
		t.Errorf("the plan placed %d and left %d unplaced, want all %d replicas planned", v.Creates, len(v.Unplaced), MaxPlanReplicas)
	}
	if rec.Body.Len() > MaxPlanAnswer {
		t.Errorf("answer %d bytes, more than MaxPlanAnswer %d", rec.Body.Len(), MaxPlanAnswer)
	}
	if live > maxLiveGrowth {
		t.Errorf("the largest plan grew the live heap by %d MB, more than %d MB (64 MB for the process)", live>>20, maxLiveGrowth>>20)
	}
	if kept > 8<<20 {
		t.Errorf("the plan left %d MB on the heap after it", kept>>20)
	}
	// With the collector as it runs in production (GOGC=100): the heap
	// itself, garbage and all.
	_, heap = planRequest(t, c.Handler(), body, 0)
	peak := heap.peak
	t.Logf("with GOGC=100 the heap grew %d MB at the most", peak>>20)
	if peak > 64<<20 {
		t.Errorf("with GOGC=100 the largest plan grew the heap by %d MB, more than 64 MB", peak>>20)
	}
}

// The shapes that cost HCL's parser and the decoder most per byte, each
// at the token bound: a line of a few bytes for every attribute, block or
// list item (most of them refused by the catalog's schema, each with its
// problem). None grows the heap by more than 64 MB, and one token past the
// bound is refused before it is parsed.
func TestPlanTokensWithinBounds(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	fill := func(head, item, tail string) func(int) string {
		return func(tokens int) string {
			per := bounded.HCLTokens([]byte(item))
			fixed := bounded.HCLTokens([]byte(head + tail))
			return head + strings.Repeat(item, (tokens-fixed)/per) + tail
		}
	}
	profile := "model \"m\" {\n  source = \"o/m\"\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"NVIDIA H200\"\n"
	for _, tc := range []struct {
		name string
		make func(tokens int) string
	}{
		{"unknown attributes", fill("", "a=1\n", "")},
		{"empty blocks", fill("", "x {}\n", "")},
		{"a map", fill(profile+"    env = {", "a=\"1\",", "}\n  }\n}\n")},
		{"lists", fill(profile+"    args = [\"1\"]\n  }\n}\nmodel \"n\" {\n  source = \"o/m\"\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"NVIDIA H200\"\n", "    spread = [\"rack\", \"rack\"]\n", "  }\n}\n")},
		{"models", fill("", "model \"m\" {\n}\n", "")},
	} {
		src := tc.make(MaxPlanTokens)
		if n := bounded.HCLTokens([]byte(src)); n > MaxPlanTokens || n < MaxPlanTokens*95/100 {
			t.Fatalf("%s: %d tokens, want just under %d", tc.name, n, MaxPlanTokens)
		}
		body, _ := json.Marshal(controllerapi.PlanRequest{Catalog: src})
		rec, heap := planRequest(t, c.Handler(), body, 0)
		peak, alloc := heap.peak, heap.allocated
		t.Logf("%s: %d kB, heap +%d MB at the most (GOGC=100), %d MB allocated: %d", tc.name, len(body)>>10, peak>>20, alloc>>20, rec.Code)
		if rec.Code == http.StatusRequestEntityTooLarge || strings.Contains(rec.Body.String(), "tokens together") {
			t.Errorf("%s: refused for its size: %.300s", tc.name, rec.Body)
		}
		if peak > 64<<20 {
			t.Errorf("%s at the token bound grew the heap by %d MB, more than 64 MB", tc.name, peak>>20)
		}
	}
	body, _ := json.Marshal(controllerapi.PlanRequest{Catalog: strings.Repeat("a=1\n", MaxPlanTokens/4+1)})
	rec := servePlan(c.Handler(), body)
	if rec.Code != http.StatusUnprocessableEntity || !strings.Contains(rec.Body.String(), fmt.Sprintf("more than the %d one plan may parse", MaxPlanTokens)) {
		t.Errorf("one line past the token bound: %d %.300s", rec.Code, rec.Body)
	}
}

// A plan past a bound is refused with 422 naming the limit and the number
// asked, before anything is placed: the test holds the lock every plan
// (and pass) takes to place, and the refusals come all the same. The
// catalog of issue 34 (3,000 models of 1,000 replicas, once a 465 MB
// answer and 3.2 GB) is refused for its size (413) before it is parsed.
func TestPlanLimits(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	tooManyHolds := make([]controllerapi.PlanHold, MaxPlanHolds+1)
	for i := range tooManyHolds {
		tooManyHolds[i] = controllerapi.PlanHold{Domain: "rack=r1"}
	}
	perModel := MaxPlanReplicas/2 + 1
	for _, tc := range []struct {
		name string
		req  controllerapi.PlanRequest
		code int
		want string
	}{
		{"issue 34's catalog", controllerapi.PlanRequest{Catalog: boundsCatalog(3000, 1000, 1, 1, false, 0)}, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("plan limit: the body is larger than %d bytes, the most a plan request may send", maxPlanBody)},
		{"models", controllerapi.PlanRequest{Catalog: boundsCatalog(MaxPlanModels+1, 1, 1, 1, false, 0)}, http.StatusUnprocessableEntity,
			fmt.Sprintf("plan limit: the catalog has %d models, more than the %d one plan may place", MaxPlanModels+1, MaxPlanModels)},
		{"tokens", controllerapi.PlanRequest{Catalog: boundsCatalog(2000, 1, 1, 1, false, 0)}, http.StatusUnprocessableEntity,
			fmt.Sprintf("tokens together, more than the %d one plan may parse", MaxPlanTokens)},
		{"replicas", controllerapi.PlanRequest{Catalog: boundsCatalog(2, perModel, 1, 1, false, 0)}, http.StatusUnprocessableEntity,
			fmt.Sprintf("plan limit: the catalog asks for %d replicas (fixed models' replicas and autoscaled models' max), more than the %d one plan may place", 2*perModel, MaxPlanReplicas)},
		{"autoscaled max", controllerapi.PlanRequest{Catalog: boundsCatalog(1, 65536, 1, 1, true, 0)}, http.StatusUnprocessableEntity,
			"plan limit: the catalog asks for 65536 replicas"},
		{"tries", controllerapi.PlanRequest{Catalog: boundsCatalog(1, MaxPlanReplicas, 3, 1, false, 0)}, http.StatusUnprocessableEntity,
			fmt.Sprintf("plan limit: the catalog asks the planner to try %d replica-profile pairs (each model's replicas times its profiles), more than the %d of one plan", 3*MaxPlanReplicas, MaxPlanTries)},
		{"budgets", controllerapi.PlanRequest{Facility: boundsFacility(MaxPlanBudgets+1, 0)}, http.StatusUnprocessableEntity,
			fmt.Sprintf("plan limit: the facility has %d budgets, more than the %d of one plan", MaxPlanBudgets+1, MaxPlanBudgets)},
		{"holds in the file", controllerapi.PlanRequest{Facility: boundsFacility(0, MaxPlanHolds+1)}, http.StatusUnprocessableEntity,
			fmt.Sprintf("plan limit: %d holds (the facility file's and the request's), more than the %d of one plan", MaxPlanHolds+1, MaxPlanHolds)},
		{"holds in the request", controllerapi.PlanRequest{Holds: tooManyHolds}, http.StatusUnprocessableEntity,
			fmt.Sprintf("plan limit: %d holds", MaxPlanHolds+1)},
	} {
		body, err := json.Marshal(tc.req)
		if err != nil {
			t.Fatal(err)
		}
		var rec *httptest.ResponseRecorder
		func() {
			c.passMu.Lock() // nothing can be placed while the test holds it
			defer c.passMu.Unlock()
			done := make(chan *httptest.ResponseRecorder, 1)
			go func() { done <- servePlan(c.Handler(), body) }()
			wait.For(t, tc.name+" refused without placing", func() (bool, string) {
				select {
				case rec = <-done:
					return true, ""
				default:
					return false, "the request waits for the planner's lock"
				}
			})
		}()
		var ae controllerapi.APIError
		if err := json.Unmarshal(rec.Body.Bytes(), &ae); rec.Code != tc.code || err != nil ||
			!strings.Contains(ae.Error, tc.want) || !strings.Contains(ae.Hint, "docs/controller.md") {
			t.Errorf("%s (body %d kB): %d %.300s, want %d with %q", tc.name, len(body)>>10, rec.Code, rec.Body, tc.code, tc.want)
		}
	}
}

// servePlan sends body to h's POST /v1/plan from loopback.
func servePlan(h http.Handler, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/v1/plan", bytes.NewReader(body))
	req.RemoteAddr = "127.0.0.1:5000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// One plan at a time: a plan sent while another is under way is 429 with
// Retry-After, and goes through once the first is done.
func TestOnePlanAtATime(t *testing.T) {
	e := newEnv(t, sixNodes, oneAlpha, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl")
	e.Pass(c)
	c.planMu.Lock() // a plan under way
	body, _ := json.Marshal(controllerapi.PlanRequest{})
	rec, _ := planRequest(t, c.Handler(), body, 0)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "one plan at a time") {
		t.Errorf("a second plan: %d %q %s, want 429 with Retry-After", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	c.planMu.Unlock()
	if rec, _ := planRequest(t, c.Handler(), body, 0); rec.Code != http.StatusOK {
		t.Errorf("the plan after: %d %.300s", rec.Code, rec.Body)
	}
}

func facilityParse(src string) (facility.Catalog, error) {
	return facility.ParseCatalog("catalog.hcl", []byte(src))
}

func facilityParseFacility(src string) (facility.Facility, error) {
	return facility.ParseFacility("facility.hcl", []byte(src))
}
