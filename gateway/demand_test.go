package gateway

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/gatewayclient"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// demandOf reads the gateway's demand endpoint with gatewayclient.DemandClient and
// returns model's entry.
func (tg *testGateway) demandOf(t *testing.T, model string) (gatewayapi.Demand, gatewayapi.ModelDemand) {
	t.Helper()
	d, err := gatewayclient.DemandClient{HTTP: tg.client}.Read(t.Context(), tg.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range d.Models {
		if m.Model == model {
			return d, m
		}
	}
	t.Fatalf("no model %s in the demand: %+v", model, d)
	return d, gatewayapi.ModelDemand{}
}

// Arrivals are counted when requests arrive, not when they complete:
// requests still being answered are arrivals and outstanding, and none is
// a completion yet. Prometheus shows the same numbers.
func TestDemandCountsArrivals(t *testing.T) {
	rep := startGatedReplica(t)
	tg := startGateway(t, Options{}, rep.instance("m", "m-0"))
	var answers []<-chan answer
	for i := range 3 {
		answers = append(answers, tg.postAsync(t.Context(), userChat("m", i)))
		rep.next(t)
	}
	_, md := tg.demandOf(t, "m")
	if md.ArrivalsTotal != 3 || md.Outstanding != 3 || md.Queued != 0 || md.State != gatewayapi.StateServing || md.Replicas != 1 {
		t.Errorf("with 3 in flight: %+v; want 3 arrivals, 3 outstanding, serving on 1 replica", md)
	}
	if got := testutil.ToFloat64(tg.m.requests.WithLabelValues("m", "200")); got != 0 {
		t.Errorf("requests_total{m,200} %v while none completed", got)
	}
	want := `
# HELP llmgw_gateway_arrivals_total Requests for the model that arrived (counted on arrival, not on completion).
# TYPE llmgw_gateway_arrivals_total counter
llmgw_gateway_arrivals_total{model="m"} 3
# HELP llmgw_gateway_outstanding_requests Requests for the model in the gateway now, being proxied or held.
# TYPE llmgw_gateway_outstanding_requests gauge
llmgw_gateway_outstanding_requests{model="m"} 3
# HELP llmgw_gateway_queued_requests Requests for the model held now for want of a replica that can take them.
# TYPE llmgw_gateway_queued_requests gauge
llmgw_gateway_queued_requests{model="m"} 0
`
	if err := testutil.GatherAndCompare(tg.reg, strings.NewReader(want),
		"llmgw_gateway_arrivals_total", "llmgw_gateway_outstanding_requests", "llmgw_gateway_queued_requests"); err != nil {
		t.Error(err)
	}
	for range 3 {
		rep.release <- struct{}{}
	}
	for _, ch := range answers {
		await(t, ch)
	}
	wait.Until(t, "nothing outstanding", func() bool { return tg.tbl.Load().models["m"].outstanding.Load() == 0 })
	if _, md = tg.demandOf(t, "m"); md.ArrivalsTotal != 3 || md.Outstanding != 0 {
		t.Errorf("after the answers: %+v", md)
	}
}

// Held requests are outstanding and queued, and their model's state says
// it is at zero; requests refused for a full queue still arrived.
func TestDemandOfAModelAtZero(t *testing.T) {
	clock := newFakeClock()
	tg := startGateway(t, Options{Now: clock.Now, Hold: HoldConfig{Timeout: time.Hour, PerModel: 2}})
	tg.UpdateModels(zeroList(gatewayapi.ListedModel{Name: "z"}), nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first := tg.postAsync(ctx, chat("z"))
	wait.Until(t, "held", func() bool { return tg.queued("z") == 1 })
	clock.Advance(4 * time.Second)
	second := tg.postAsync(ctx, chat("z"))
	wait.Until(t, "held", func() bool { return tg.queued("z") == 2 })
	if got := tg.post(t, "/v1/chat/completions", chat("z")); got.status != http.StatusServiceUnavailable {
		t.Fatalf("third: %d", got.status)
	}
	clock.Advance(time.Second)
	_, md := tg.demandOf(t, "z")
	want := gatewayapi.ModelDemand{Model: "z", State: gatewayapi.StateScaledToZero, Listed: &gatewayapi.ListedModel{Name: "z"}, Outstanding: 2, Queued: 2,
		OldestQueuedSeconds: 5, ArrivalsTotal: 3, ArrivalRate: md.ArrivalRate, Routing: gatewayapi.RoutingLeastOutstanding}
	if diff := cmp.Diff(want, md); diff != "" {
		t.Errorf("demand (-want +got):\n%s", diff)
	}
	if md.ArrivalRate <= 0 {
		t.Errorf("arrival rate %v with 3 arrivals in the window", md.ArrivalRate)
	}
	cancel()
	<-first
	<-second
}

// The arrival rate is the arrivals in the window over the span it
// covers; arrivals older than the window drop out of the rate, not out of
// the counter, and with no sample in the window TTFT is no reading.
func TestDemandWindow(t *testing.T) {
	clock := newFakeClock()
	a := startReplica(t, "m", "a", nil)
	tg := startGateway(t, Options{Now: clock.Now, DemandWindow: 30 * time.Second}, a.instance())
	clock.Advance(time.Minute)
	for range 15 {
		if got := tg.post(t, "/v1/chat/completions", chat("m")); got.status != http.StatusOK {
			t.Fatal(got.status)
		}
	}
	d, md := tg.demandOf(t, "m")
	if d.WindowSeconds < 27 || d.WindowSeconds > 30 {
		t.Errorf("window %vs, want between 27s and 30s (nine slots of 3s and part of one)", d.WindowSeconds)
	}
	if want := 15 / d.WindowSeconds; math.Abs(md.ArrivalRate-want) > 1e-9 {
		t.Errorf("arrival rate %v, want 15 / %v", md.ArrivalRate, d.WindowSeconds)
	}
	if md.TTFTSamples != 15 || md.TTFTP90Seconds == nil {
		t.Errorf("TTFT: %d samples, p90 %v", md.TTFTSamples, md.TTFTP90Seconds)
	}
	if !d.SampledAt.Equal(clock.Now()) || !d.StartedAt.Equal(clock.Now().Add(-time.Minute)) {
		t.Errorf("sampled %v started %v", d.SampledAt, d.StartedAt)
	}
	clock.Advance(31 * time.Second)
	_, md = tg.demandOf(t, "m")
	if md.ArrivalRate != 0 || md.ArrivalsTotal != 15 || md.TTFTSamples != 0 || md.TTFTP90Seconds != nil {
		t.Errorf("a window later: %+v; want rate 0, 15 arrivals in all, no TTFT reading", md)
	}
}

// In its first window a gateway's rates are over the time it has been up.
func TestDemandWindowAfterStart(t *testing.T) {
	clock := newFakeClock()
	a := startReplica(t, "m", "a", nil)
	tg := startGateway(t, Options{Now: clock.Now, DemandWindow: time.Minute}, a.instance())
	clock.Advance(2 * time.Second)
	for range 4 {
		tg.post(t, "/v1/chat/completions", chat("m"))
	}
	d, md := tg.demandOf(t, "m")
	if d.WindowSeconds != 2 || md.ArrivalRate != 2 {
		t.Errorf("window %vs rate %v; want 2s and 2/s", d.WindowSeconds, md.ArrivalRate)
	}
}

// TTFT is from the request's dispatch to a replica to its first byte to
// the client, of 2xx answers only: the p90 of ten answers taking 100ms to
// 1s is 900ms (within a bucket's 4.4 %); a 500 and the time a request was
// held are not in it.
func TestDemandTTFT(t *testing.T) {
	clock := newFakeClock()
	delay := make(chan time.Duration, 1)
	status := http.StatusOK
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clock.Advance(<-delay) // the replica takes this long, on the gateway's clock
		w.WriteHeader(status)
		fmt.Fprint(w, `{"object":"chat.completion"}`)
	}))
	t.Cleanup(up.Close)
	inst := func(model string) Instance {
		return Instance{ID: model, Model: model, Replica: model, Address: strings.TrimPrefix(up.URL, "http://"), Weight: 1}
	}
	tg := startGateway(t, Options{Now: clock.Now, DemandWindow: time.Hour, Hold: HoldConfig{Timeout: time.Hour}}, inst("m"))
	for i := 1; i <= 10; i++ {
		delay <- time.Duration(i) * 100 * time.Millisecond
		if got := tg.post(t, "/v1/chat/completions", chat("m")); got.status != http.StatusOK {
			t.Fatal(got.status)
		}
	}
	status = http.StatusInternalServerError
	delay <- time.Minute
	tg.post(t, "/v1/chat/completions", chat("m"))
	_, md := tg.demandOf(t, "m")
	if md.TTFTSamples != 10 || md.TTFTP90Seconds == nil || math.Abs(*md.TTFTP90Seconds/0.9-1) > 0.045 {
		t.Errorf("TTFT: %d samples, p90 %v; want 10 samples, p90 0.9s", md.TTFTSamples, ptrVal(md.TTFTP90Seconds))
	}

	// A request held 10s for a model at zero, then answered in 200ms: its
	// sample is 200ms.
	status = http.StatusOK
	tg.UpdateModels(zeroList(gatewayapi.ListedModel{Name: "z"}), nil)
	held := tg.postAsync(t.Context(), chat("z"))
	wait.Until(t, "held", func() bool { return tg.queued("z") == 1 })
	clock.Advance(10 * time.Second)
	delay <- 200 * time.Millisecond
	tg.Update(Snapshot{Instances: []Instance{inst("m"), inst("z")}})
	if a := await(t, held); a.status != http.StatusOK {
		t.Fatalf("held: %d %s", a.status, a.body)
	}
	_, md = tg.demandOf(t, "z")
	if md.TTFTSamples != 1 || md.TTFTP90Seconds == nil || math.Abs(*md.TTFTP90Seconds/0.2-1) > 0.045 {
		t.Errorf("TTFT of the held request: %d samples, p90 %v; want 0.2s", md.TTFTSamples, ptrVal(md.TTFTP90Seconds))
	}
	if got := testutil.ToFloat64(tg.m.held.WithLabelValues("z", heldReleased)); got != 1 {
		t.Errorf("held_total{z,released} %v", got)
	}
}

func ptrVal(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// The window's quantile is within a bucket of the samples' own, for
// samples spread over many orders of magnitude.
func TestWindowQuantile(t *testing.T) {
	w := newWindow(time.Minute)
	now := time.Unix(1_700_000_000, 0)
	var samples []time.Duration
	x := uint64(42)
	for range 5000 {
		x = x*6364136223846793005 + 1442695040888963407 // a fixed LCG: the same samples every run
		d := time.Duration(float64(50*time.Microsecond) * math.Exp2(float64(x>>40)/float64(1<<24)*20))
		samples = append(samples, d)
		w.ttft(now, d)
	}
	st := w.stats(now, time.Hour)
	sorted := append([]time.Duration(nil), samples...)
	for i := range sorted { // insertion sort is fine for a test of 5000
		for j := i; j > 0 && sorted[j] < sorted[j-1]; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	exact := sorted[int(math.Ceil(0.9*float64(len(sorted))))-1]
	if st.ttftN != 5000 || math.Abs(float64(st.ttftP90)/float64(exact)-1) > 0.045 {
		t.Errorf("p90 %v of %d, exact %v", st.ttftP90, st.ttftN, exact)
	}
	// Slots expire as the window moves on: it covers nine slots of 6s
	// and part of a tenth, 54s to 60s.
	w.arrive(now)
	if st := w.stats(now.Add(54*time.Second), time.Hour); st.arrivals != 1 || st.ttftN != 5000 {
		t.Errorf("54s later: %+v", st)
	}
	if st := w.stats(now.Add(66*time.Second), time.Hour); st.arrivals != 0 || st.ttftN != 0 {
		t.Errorf("66s later: %d arrivals, %d samples; want none", st.arrivals, st.ttftN)
	}
	// The slot of now, reused ten slots later, starts empty.
	later := now.Add(60 * time.Second)
	w.arrive(later)
	if s := w.slots[w.slotNo(later)%winSlots]; s.k != w.slotNo(later) || s.arrivals != 1 || s.ttftN != 0 || s.ttft != ([ttftBuckets]uint32{}) {
		t.Errorf("reused slot: k %d (want %d), %d arrivals, %d samples", s.k, w.slotNo(later), s.arrivals, s.ttftN)
	}
	if w.slotNo(later)%winSlots != w.slotNo(now)%winSlots {
		t.Fatal("the test's times are not ten slots apart")
	}
}
