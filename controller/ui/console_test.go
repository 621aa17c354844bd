package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/llmgw/llmgw/controller/ui"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/internal/testing/ctltest"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// The files are embedded and served with their types; /ui redirects to
// /ui/, and the page loads its script and styles relative to itself.
func TestServesEmbeddedFiles(t *testing.T) {
	e := ctltest.Start(t, ctltest.Options{})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(e.URL + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d to %q, want 301 to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, tc := range []struct{ path, ctype, contains string }{
		{"/ui/", "text/html", `<script src="app.js"`},
		{"/ui/app.js", "javascript", "const API = '../v1/';"},
		{"/ui/style.css", "text/css", ".rack.held"},
	} {
		resp, err := http.Get(e.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), tc.ctype) || !strings.Contains(string(body), tc.contains) {
			t.Errorf("GET %s: %d %q, want 200 %s with %q", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), tc.ctype, tc.contains)
		}
		if got := resp.Header.Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", tc.path, got)
		}
	}
	resp, err = http.Get(e.URL + "/ui/nope.js")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /ui/nope.js: %d, want 404", resp.StatusCode)
	}
	if ui.Handler() == nil {
		t.Fatal("no handler")
	}
}

// chromium returns the path of a Chromium or Chrome binary, or skips the
// test saying how to install one.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LLMGW_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium: install it to run the console's browser test (Debian: apt-get install -y chromium), or set LLMGW_CHROMIUM to a Chromium or Chrome binary")
	return ""
}

// browser starts a headless Chromium for the test and returns a tab's
// context. JavaScript exceptions on the page fail the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	exe := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 1000),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	done := make(chan struct{}) // closed when the exception reader below ends
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		<-done
	})
	// Start the browser on a context without a deadline: the first Run
	// binds the browser's life to its context.
	if err := chromedp.Do(ctx); err != nil {
		close(done)
		t.Fatalf("start %s: %v", exe, err)
	}
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	go func() {
		defer close(done)
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			msg := ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				msg += " " + ev.ExceptionDetails.Exception.Description
			}
			t.Errorf("JavaScript exception on the page: %s (line %d)", msg, ev.ExceptionDetails.LineNumber)
		}
	}()
	return ctx
}

// step runs browser actions with a deadline (generous, for a loaded
// 2-core machine), failing the test with what it was doing.
func step(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// text reads an element's rendered text in one step, so that a re-render
// between finding the element and reading it cannot fail the read.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	q, _ := json.Marshal(sel)
	s, err := chromedp.Run(sctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%s) || {innerText: ''}).innerText`, q)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// The console in a real browser against a controller on the Nomad fake:
// without the API token the page reads nothing and says where to put it;
// with it the Facility view draws the racks, and holding a rack through
// the page marks it held in the page and in the API. The Nodes and Replicas views
// show the nodes and a replica's explanation.
func TestConsoleHoldsARackInTheBrowser(t *testing.T) {
	ctx := browser(t)
	e := ctltest.Start(t, ctltest.Options{Token: "s3cret"})
	dir := ctltest.Artifacts(t)
	const rack = `section.rack[data-domain="rack=r01-k01"]`

	// Without the token the page reads nothing (reads need it too) and
	// says what to do; its own files load without one.
	step(t, ctx, "open the Facility view without a token",
		chromedp.Navigate(e.URL+"/ui/#facility"),
		chromedp.WaitVisible(chromedp.CSS(`#view p.empty`)),
	)
	if got := text(t, ctx, "#view"); !strings.Contains(got, "missing or wrong API token") || !strings.Contains(got, "API token field") {
		t.Errorf("page without a token = %q, want the API's error and where to put the token", got)
	}

	// With the token (typed into the page, kept in sessionStorage) it reads.
	step(t, ctx, "save the token",
		chromedp.SendKeys(chromedp.CSS("#token"), "s3cret"),
		chromedp.Click(chromedp.CSS("#token-form button")),
		chromedp.WaitVisible(chromedp.CSS(rack)),
		chromedp.WaitVisible(chromedp.CSS(`section.rack.held[data-domain="rack=r02-k02"]`)), // held in the facility file
	)
	if got := text(t, ctx, rack+" h4"); got != "r01-k01" {
		t.Errorf("rack card title = %q, want r01-k01", got)
	}

	// Highlight alpha: the racks with an alpha replica are marked.
	step(t, ctx, "highlight alpha",
		chromedp.SetValue(chromedp.CSS("#model"), "alpha"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#model').dispatchEvent(new Event('change'))`),
		chromedp.WaitVisible(chromedp.CSS(`li.node.hl[data-node="n02"]`)),
	)

	step(t, ctx, "hold the rack",
		chromedp.Click(chromedp.CSS(rack+" button.hold")),
		chromedp.WaitVisible(chromedp.CSS(rack+" input.reason")),
		chromedp.SendKeys(chromedp.CSS(rack+" input.reason"), "fan swap"),
		chromedp.Click(chromedp.CSS(rack+" button.confirm-hold")),
		chromedp.WaitVisible(chromedp.CSS(`section.rack.held[data-domain="rack=r01-k01"] .badge.held`)),
	)
	if got := text(t, ctx, rack+" .reason"); got != "fan swap" {
		t.Errorf("held rack's reason = %q, want %q", got, "fan swap")
	}
	stored, err := chromedp.Run(ctx, chromedp.Evaluate[string](`sessionStorage.getItem('llmgw.token')`))
	if err != nil || stored != "s3cret" {
		t.Errorf("token in sessionStorage = %q, %v; want s3cret", stored, err)
	}
	var f controllerapi.FacilityView
	if code, body := e.Call(http.MethodGet, "/v1/facility", "s3cret", nil, &f); code != http.StatusOK {
		t.Fatalf("GET /v1/facility: %d %s", code, body)
	}
	var hold *controllerapi.Hold
	for _, d := range f.Domains {
		if d.Domain == "rack=r01-k01" {
			hold = d.Hold
		}
	}
	if hold == nil || hold.Reason != "fan swap" || hold.Drain || hold.Source != "runtime" {
		t.Errorf("API's hold on rack=r01-k01 = %+v, want a run-time hold for \"fan swap\" without drain", hold)
	}
	screenshot(t, ctx, dir, "facility-held.png")

	// Nodes view: the rack's nodes show the hold; labels can be edited.
	step(t, ctx, "open the Nodes view",
		chromedp.Navigate(e.URL+"/ui/#nodes"),
		chromedp.WaitVisible(chromedp.CSS(`#nodes tr[data-node="n01"]`)),
	)
	if got := text(t, ctx, `#nodes tr[data-node="n01"]`); !strings.Contains(got, "rack=r01-k01") || !strings.Contains(got, "ams1/a/r01/r01-k01/p01-a") {
		t.Errorf("n01's row = %q, want its location and hold", got)
	}
	step(t, ctx, "label n01 through the page",
		chromedp.Click(chromedp.CSS(`#nodes tr[data-node="n01"] button.edit-labels`)),
		chromedp.WaitVisible(chromedp.CSS("#label-pdu")),
		// Select the field's text, as a triple click would, and type over it.
		chromedp.Focus(chromedp.CSS("#label-pdu")),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#label-pdu').select()`),
		chromedp.SendKeys(chromedp.CSS("#label-pdu"), "p01-z"),
		chromedp.Click(chromedp.CSS(".labelform button[type=submit]")),
	)
	wait.For(t, "n01's pdu label in Nomad", func() (bool, string) {
		got := e.Fake.Node(e.NodeIDs["n01"]).Meta["llmgw.pdu"]
		return got == "p01-z", got
	})
	wait.For(t, "the page to show n01's new pdu", func() (bool, string) {
		got := text(t, ctx, `#nodes tr[data-node="n01"]`)
		return strings.Contains(got, "ams1/a/r01/r01-k01/p01-z"), got
	})
	screenshot(t, ctx, dir, "nodes.png")

	// Replicas view: gamma-0's explanation says why it is not placed.
	step(t, ctx, "explain gamma-0",
		chromedp.Navigate(e.URL+"/ui/#replicas"),
		chromedp.WaitVisible(chromedp.CSS(`#replicas tr[data-replica="gamma-0"]`)),
		chromedp.Click(chromedp.CSS(`#replicas tr[data-replica="gamma-0"]`)),
		chromedp.WaitVisible(chromedp.CSS(".explain table")),
	)
	if got := text(t, ctx, ".explain"); !strings.Contains(got, "too few free NVIDIA H200") {
		t.Errorf("gamma-0's explanation = %q, want the GPU rejection", got)
	}
	screenshot(t, ctx, dir, "replicas.png")
}

// The Models view: every model's counts, signals and decision, and each
// autoscaled model's last hour drawn from the controller's history.
func TestConsoleShowsModels(t *testing.T) {
	ctx := browser(t)
	e := ctltest.Start(t, ctltest.Options{Autoscale: true})
	dir := ctltest.Artifacts(t)
	step(t, ctx, "open the Models view",
		chromedp.Navigate(e.URL+"/ui/#models"),
		chromedp.WaitVisible(chromedp.CSS(`#models tr[data-model="delta"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#demand-delta g.series[data-series="outstanding"] polyline`)),
		chromedp.WaitVisible(chromedp.CSS(`#replicas-delta g.series[data-series="wanted"] polyline`)),
	)
	if got := text(t, ctx, `#models tr[data-model="delta"]`); !strings.Contains(got, "2 serving / 2 wanted") || !strings.Contains(got, "1–3") ||
		!strings.Contains(got, "hold") || !strings.Contains(got, "missing") {
		t.Errorf("delta's row = %q, want its counts, bounds, decision and a missing engine signal", got)
	}
	if got := text(t, ctx, `#models tr[data-model="alpha"]`); !strings.Contains(got, "3 serving / 3 wanted") || !strings.Contains(got, "fixed") {
		t.Errorf("alpha's row = %q", got)
	}
	if got := text(t, ctx, `section.model-card[data-model="delta"] .explain-line`); got != "wants 2, has 2" {
		t.Errorf("delta's count line = %q", got)
	}
	pts, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#demand-delta g.series[data-series="outstanding"] polyline').getAttribute('points')`))
	if err != nil || pts == "" {
		t.Errorf("delta's outstanding line: %q, %v", pts, err)
	}
	screenshot(t, ctx, dir, "models.png")
}

// Before the controller has read Nomad, the page shows the API's 503
// message and hint in place of the view, not an empty facility.
func TestConsoleBeforeTheControllerReadsNomad(t *testing.T) {
	ctx := browser(t)
	e := ctltest.StartUnread(t)
	step(t, ctx, "open the Facility view of a controller that has not read Nomad",
		chromedp.Navigate(e.URL+"/ui/#facility"),
		chromedp.WaitVisible(chromedp.CSS(`#view p.empty`)),
	)
	got := text(t, ctx, "#view")
	if !strings.Contains(got, "the controller has not read Nomad yet") || !strings.Contains(got, "try again in a moment") {
		t.Errorf("page = %q, want the API's message that the controller has not read Nomad yet, and its hint", got)
	}
	if n := text(t, ctx, "#view section.rack"); n != "" {
		t.Errorf("page shows racks before the controller read Nomad: %q", n)
	}
}

// The power map: against a leading controller whose PDU p01-a counts
// measured and draws near its limit (ctltest's Power option), the Facility
// view shows each budgeted domain's count and caps as GET /v1/power and
// /v1/facility give them: p01-a measured, with what declared would be, and
// its caps engaged on as many GPUs as the API says, its bound against its
// limit; its node's capped GPUs marked; rack r01-k01 declared, caps off.
func TestConsoleShowsPowerCaps(t *testing.T) {
	ctx := browser(t)
	e := ctltest.Start(t, ctltest.Options{Power: true})
	dir := ctltest.Artifacts(t)
	var pv controllerapi.PowerView
	capped, onN01 := 0, 0
	wait.For(t, "pdu=p01-a's caps engaged in GET /v1/power", func() (bool, string) {
		pv = controllerapi.PowerView{}
		if code, body := e.Call(http.MethodGet, "/v1/power", "", nil, &pv); code != http.StatusOK {
			return false, body
		}
		capped, onN01 = 0, 0
		for _, g := range pv.GPUs {
			if g.CapWatts > 0 && g.CapDomain == "pdu=p01-a" {
				capped++
			}
			if g.CapWatts > 0 && g.Node == "n01" {
				onN01++
			}
		}
		for _, d := range pv.Domains {
			if d.Domain == "pdu=p01-a" {
				return d.Engaged && capped > 0, fmt.Sprintf("%+v, %d GPUs capped", d, capped)
			}
		}
		return false, fmt.Sprintf("%+v", pv.Domains)
	})
	var f controllerapi.FacilityView
	if code, body := e.Call(http.MethodGet, "/v1/facility", "", nil, &f); code != http.StatusOK {
		t.Fatalf("GET /v1/facility: %d %s", code, body)
	}
	var pdu controllerapi.DomainView
	for _, d := range f.Domains {
		if d.Domain == "pdu=p01-a" {
			pdu = d
		}
	}
	if pdu.Count != "measured" {
		t.Fatalf("pdu=p01-a in GET /v1/facility: %+v, want it counted measured", pdu)
	}

	const row = `#domains tr[data-domain="pdu=p01-a"]`
	step(t, ctx, "open the Facility view",
		chromedp.Navigate(e.URL+"/ui/#facility"),
		chromedp.WaitVisible(chromedp.CSS(row+" .caps.engaged")),
		chromedp.WaitVisible(chromedp.CSS(`li.node[data-node="n01"] .ncap`)),
	)
	units := "GPUs"
	if capped == 1 {
		units = "GPU"
	}
	kw := func(w float64) string { return fmt.Sprintf("%.1f kW", w/1000) }
	var dom controllerapi.PowerDomain
	for _, d := range pv.Domains {
		if d.Domain == "pdu=p01-a" {
			dom = d
		}
	}
	if got, want := text(t, ctx, row+" .caps"), fmt.Sprintf("capped %d %s, bound %s of %s limit", capped, units, kw(dom.BoundWatts), kw(dom.LimitWatts)); !strings.EqualFold(got, want) {
		t.Errorf("pdu=p01-a's caps = %q, want %q", got, want)
	}
	if got, want := text(t, ctx, row+" .count"), fmt.Sprintf("measured %s admitted, declared would be %s", kw(pdu.Committed), kw(pdu.DeclaredWatts)); !strings.EqualFold(got, want) {
		t.Errorf("pdu=p01-a's count = %q, want %q", got, want)
	}
	if got, want := text(t, ctx, `li.node[data-node="n01"] .ncap`), fmt.Sprintf("%d capped", onN01); got != want {
		t.Errorf("n01's capped GPUs = %q, want %q", got, want)
	}
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('li.node[data-node="n01"] .gpus i.cap').length`))
	if err != nil || n != onN01 {
		t.Errorf("n01's GPUs marked capped: %d, %v; want %d", n, err, onN01)
	}
	const rack = `section.rack[data-domain="rack=r01-k01"] .power`
	if got := text(t, ctx, rack); got != "declared · caps off" {
		t.Errorf("rack r01-k01's power line = %q, want %q", got, "declared · caps off")
	}
	screenshot(t, ctx, dir, "power-map.png")
}
