package controller

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/llmgw/llmgw/controller/observe"
	"github.com/llmgw/llmgw/controller/store"
	"github.com/llmgw/llmgw/controller/ui"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/httpjson"
	"github.com/llmgw/llmgw/internal/suggest"
)

// Handler is the controller's HTTP API (JSON). When api_token is set, every
// call needs it as a bearer token (Authorization: Bearer <api_token>),
// reads too, except GET /healthz and GET /metrics, and the web console's
// static files under /ui/, which hold no data: the console sends the token
// the operator types into it with each of its API calls. Without
// api_token, reads are open and every write is refused (403), unless
// insecure_writes is on (loopback only): then writes are open too (auth).
func (c *Controller) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", c.healthz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(c.metrics.reg, promhttp.HandlerOpts{}))
	for pattern, h := range c.routes() {
		mux.HandleFunc(pattern, c.auth(h))
	}
	// The web console: static files; it calls the API above like llmgw ctl.
	mux.Handle("GET /ui/", http.StripPrefix("/ui", ui.Handler()))
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	return mux
}

// routes are the API's calls behind the token, by ServeMux pattern.
func (c *Controller) routes() map[string]http.HandlerFunc {
	// Calls whose answer comes from what the controller read from Nomad
	// (its view, or its snapshot of the nodes) wait for the first complete
	// read: before it they would answer empty lists or "no such node".
	read := c.needsRead
	return map[string]http.HandlerFunc{
		"GET /v1/replicas":                   read(c.listReplicas),
		"GET /v1/replicas/{id}":              read(c.getReplica),
		"GET /v1/nodes":                      read(c.listNodes),
		"GET /v1/facility":                   read(c.getFacility),
		"GET /v1/power":                      read(c.getPower),
		"GET /v1/catalog":                    c.getCatalog,
		"PUT /v1/facility/holds/{domain}":    read(c.putHold),
		"DELETE /v1/facility/holds/{domain}": c.deleteHold,
		"PUT /v1/nodes/{node}/labels":        read(c.putLabels),
		"POST /v1/reload":                    c.postReload,
		"POST /v1/plan":                      read(c.postPlan),
		"GET /v1/models":                     read(c.listModels),
		"GET /v1/models/{model}":             read(c.getModel),
		"GET /v1/models/{model}/history":     read(c.getHistory),
		"PUT /v1/models/{model}/pin":         c.putPin,
		"DELETE /v1/models/{model}/pin":      c.deletePin,
		"GET /v1/signals":                    c.getSignals,
	}
}

// notReadYet says why the controller cannot yet answer from what it read
// from Nomad: a list it has not read once (nodes, allocations, jobs,
// service checks), or no view built from them yet (the first pass, or a
// standby's first view refresh, comes within about 200 ms of the last list's
// first read). "" once it can.
func (c *Controller) notReadYet() string {
	if !c.views.get().At.IsZero() {
		return ""
	}
	snap := c.obs.snapshot()
	var missing []string
	for _, l := range []struct {
		what string
		done bool
	}{
		{"nodes", snap.nodesSynced}, {"allocations", snap.allocSynced},
		{"jobs", snap.jobsSynced}, {"service checks", snap.checksSynced},
	} {
		if !l.done {
			missing = append(missing, l.what)
		}
	}
	if len(missing) > 0 {
		return "the controller has not read Nomad yet (still to read: " + strings.Join(missing, ", ") + ")"
	}
	return "the controller has read Nomad but not built its view from it yet"
}

// notReadyRetry is the Retry-After, in seconds, of a 503 for a controller
// that has not read Nomad yet.
const notReadyRetry = "1"

// writeNotRead answers 503 with msg and a Retry-After.
func writeNotRead(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", notReadyRetry)
	writeErr(w, http.StatusServiceUnavailable, msg,
		"it answers once its first read of Nomad is complete (GET /healthz says synced); try again in a moment")
}

// needsRead answers 503 until the controller has read Nomad once and
// built its view (notReadYet), then calls h.
func (c *Controller) needsRead(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if msg := c.notReadYet(); msg != "" {
			writeNotRead(w, msg)
			return
		}
		h(w, r)
	}
}

func writeErr(w http.ResponseWriter, status int, msg, hint string) {
	httpjson.WriteIndented(w, status, controllerapi.APIError{Error: msg, Hint: hint})
}

// Who made an API call, as its writes record it (a hold's or pin's
// set_by, the logs' "by"): the identity the controller authenticated,
// never what the request says of itself.
const (
	// CallerToken: the call carried api_token.
	CallerToken = "api_token"
	// CallerInsecure: insecure_writes let the call in without a token,
	// from this host.
	CallerInsecure = "insecure-loopback"
)

type callerKey struct{}

// caller is who made r, as auth authenticated it ("" for a read of a
// controller without api_token).
func caller(r *http.Request) string {
	who, _ := r.Context().Value(callerKey{}).(string)
	return who
}

// isWrite reports whether r asks the API to change something: any method
// but GET and HEAD.
func isWrite(r *http.Request) bool { return r.Method != http.MethodGet && r.Method != http.MethodHead }

// auth lets r through to h when it may: with api_token set, only with the
// token (401 otherwise); without it, reads always, writes only with
// insecure_writes and from a loopback address (403 otherwise). Nothing
// else is done for a refused call: no body read, no Nomad call.
func (c *Controller) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		who := ""
		switch {
		case c.cfg.APIToken != "":
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(c.cfg.APIToken)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="llmgw"`)
				writeErr(w, http.StatusUnauthorized, "missing or wrong API token", "send Authorization: Bearer <api_token> (llmgw ctl: LLMGW_TOKEN)")
				return
			}
			who = CallerToken
		case !isWrite(r):
		case !c.cfg.InsecureWrites:
			writeErr(w, http.StatusForbidden, "writes need an API token, and this controller has no api_token",
				"set api_token in the controller's llmgw.hcl and send it as Authorization: Bearer <api_token> (llmgw ctl: LLMGW_TOKEN); "+
					"for development on loopback only, insecure_writes = true")
			return
		case !loopbackRemote(r.RemoteAddr):
			writeErr(w, http.StatusForbidden, fmt.Sprintf("insecure_writes takes writes from this host only, not from %s", r.RemoteAddr),
				"set api_token in the controller's llmgw.hcl to take writes from elsewhere")
			return
		default:
			who = CallerInsecure
		}
		h(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, who)))
	}
}

// loopbackRemote reports whether a request's RemoteAddr is a loopback IP.
func loopbackRemote(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c *Controller) healthz(w http.ResponseWriter, _ *http.Request) {
	synced := c.obs.snapshot().synced()
	status := http.StatusOK
	body := map[string]any{"leader": c.lead.isLeading(), "synced": synced}
	if err := c.files.errs(); err != nil {
		body["config_error"] = err.Error()
	}
	httpjson.WriteIndented(w, status, body)
}

func (c *Controller) currentView() controllerapi.View {
	obs := c.engines.all()
	v := c.views.get()
	v.Leader = c.lead.isLeading()
	// The engine readings are newer than the pass that built the view.
	v.Replicas = slices.Clone(v.Replicas)
	for i := range v.Replicas {
		if m, ok := obs[v.Replicas[i].JobID]; ok && v.Replicas[i].JobID != "" {
			v.Replicas[i].Engine = &m
		}
	}
	return v
}

func (c *Controller) listReplicas(w http.ResponseWriter, r *http.Request) {
	v := c.currentView()
	model := r.URL.Query().Get("model")
	out := []controllerapi.ReplicaView{}
	for _, rv := range v.Replicas {
		if model == "" || rv.Model == model {
			out = append(out, rv)
		}
	}
	httpjson.WriteIndented(w, http.StatusOK, out)
}

func (c *Controller) getReplica(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	v := c.currentView()
	var found *controllerapi.ReplicaView
	var ids []string
	for i := range v.Replicas {
		ids = append(ids, v.Replicas[i].ID)
		if v.Replicas[i].ID == id {
			found = &v.Replicas[i]
		}
	}
	if found == nil {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("no replica %q", id), suggest.Hint(id, ids))
		return
	}
	d := controllerapi.ReplicaDetail{ReplicaView: *found}
	var e controllerapi.Explain
	if ok, err := c.store.Decision(id, &e); err != nil {
		c.log.Warn("read decision", "replica", id, "error", err)
	} else if ok {
		d.Explain = &e
	}
	if found.JobID != "" && found.State != "serving" && found.State != "starting" {
		d.Nomad = c.nomadReasons(r.Context(), found.JobID)
	}
	if found.JobID != "" {
		d.Phases = c.replicaPhases(r.Context(), found.JobID)
	}
	for _, m := range c.models() {
		if m.Name == found.Model && m.Autoscale {
			d.Scale = &controllerapi.ModelScale{Explain: m.Explain, Reason: m.Reason, Decision: m.Decision, Pin: m.Pin}
		}
	}
	httpjson.WriteIndented(w, http.StatusOK, d)
}

// nomadReasons reads why Nomad could not place a job's groups.
// replicaPhases reads a replica job's start from Nomad: its shard-0
// allocations with their task states (which the controller's own watch
// leaves out, being the bulk of an allocation), the newest one's phases.
func (c *Controller) replicaPhases(ctx context.Context, jobID string) []controllerapi.Phase {
	qo := *c.qo
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	allocs, _, err := c.nomad.Jobs().Allocations(jobID, false, (&qo).WithContext(ctx))
	if err != nil {
		return nil
	}
	var newest *api.AllocationListStub
	for _, a := range allocs {
		if a.TaskGroup == observe.CheckedGroup && (newest == nil || a.CreateIndex > newest.CreateIndex) {
			newest = a
		}
	}
	return phases(newest)
}

func (c *Controller) nomadReasons(ctx context.Context, jobID string) []controllerapi.NomadReason {
	qo := *c.qo
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	evals, _, err := c.nomad.Jobs().Evaluations(jobID, (&qo).WithContext(ctx))
	if err != nil || len(evals) == 0 {
		return nil
	}
	sort.Slice(evals, func(i, j int) bool { return evals[i].CreateIndex > evals[j].CreateIndex })
	var out []controllerapi.NomadReason
	for _, ev := range evals {
		if len(ev.FailedTGAllocs) == 0 {
			continue
		}
		for g, m := range ev.FailedTGAllocs {
			out = append(out, controllerapi.NomadReason{Group: g, NodesEvaluated: m.NodesEvaluated, NodesFiltered: m.NodesFiltered,
				NodesExhausted: m.NodesExhausted, ConstraintFiltered: m.ConstraintFiltered, DimensionExhausted: m.DimensionExhausted})
		}
		break // the latest evaluation that failed to place
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

func (c *Controller) listNodes(w http.ResponseWriter, r *http.Request) {
	v := c.currentView()
	dom := r.URL.Query().Get("domain")
	out := []controllerapi.NodeView{}
	if dom != "" {
		d, err := facility.ParseDomain(dom)
		if err != nil {
			writeErr(w, http.StatusBadRequest, "domain: "+err.Error(), "write level=value, such as rack=r01-k01")
			return
		}
		for _, n := range v.Nodes {
			if n.Location[d.Level.String()] == d.Value {
				out = append(out, n)
			}
		}
	} else {
		out = append(out, v.Nodes...)
	}
	httpjson.WriteIndented(w, http.StatusOK, out)
}

func (c *Controller) getPower(w http.ResponseWriter, _ *http.Request) {
	httpjson.WriteIndented(w, http.StatusOK, c.power.view(c.now()))
}

func (c *Controller) getFacility(w http.ResponseWriter, _ *http.Request) {
	v := c.currentView()
	_, fac := c.files.get()
	hr := fac.Headroom
	httpjson.WriteIndented(w, http.StatusOK, controllerapi.FacilityView{Headroom: hr, Domains: append([]controllerapi.DomainView{}, v.Domains...)})
}

// Redacted stands in for every profile env value the API shows.
const Redacted = "(redacted)"

// redact returns a copy of models whose profiles' env values are Redacted,
// keys kept: the API never returns an env value, since that is where
// tokens sit (secrets belong in env_from_variable, whose references it
// shows). The models in force are left alone.
func redact(models []facility.Model) []facility.Model {
	out := make([]facility.Model, len(models))
	for i, m := range models {
		m.Profiles = slices.Clone(m.Profiles)
		for j := range m.Profiles {
			if env := m.Profiles[j].Env; env != nil {
				red := make(map[string]string, len(env))
				for k := range env {
					red[k] = Redacted
				}
				m.Profiles[j].Env = red
			}
		}
		out[i] = m
	}
	return out
}

func (c *Controller) getCatalog(w http.ResponseWriter, _ *http.Request) {
	cat, at := c.files.loaded()
	cv := controllerapi.CatalogView{Models: redact(cat.Models), LoadedAt: at, Warnings: cat.Warnings()}
	if err := c.files.errs(); err != nil {
		cv.Error = err.Error()
	}
	httpjson.WriteIndented(w, http.StatusOK, cv)
}

func (c *Controller) putHold(w http.ResponseWriter, r *http.Request) {
	d, err := facility.ParseDomain(r.PathValue("domain"))
	if err != nil {
		writeErr(w, http.StatusBadRequest, "domain: "+err.Error(), "write level=value, such as rack=r01-k01")
		return
	}
	var req controllerapi.HoldRequest
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil {
			writeErr(w, http.StatusBadRequest, "body: "+err.Error(), `send {"reason": "...", "drain": true|false}`)
			return
		}
	}
	if !c.obs.knownDomain(d) {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("no node is in %s", d), suggest.Hint(d.String(), c.obs.domainKeys()))
		return
	}
	h := store.Hold{Domain: d.String(), Reason: req.Reason, Drain: req.Drain, SetAt: c.now().UTC(), SetBy: caller(r)}
	if err := c.store.SetHold(h); err != nil {
		writeErr(w, http.StatusBadGateway, err.Error(), "")
		return
	}
	c.log.Info("hold set", "domain", h.Domain, "reason", h.Reason, "drain", h.Drain, "by", h.SetBy)
	httpjson.WriteIndented(w, http.StatusOK, HoldAnswer{Hold: h, Warning: c.awaitView(r.Context())})
}

// HoldAnswer is the answer to PUT /v1/facility/holds/{domain}: the hold
// as stored, and a warning when the controller's view did not show it in
// time (the hold is set all the same).
type HoldAnswer struct {
	store.Hold
	Warning string `json:"warning,omitempty"`
}

func (c *Controller) deleteHold(w http.ResponseWriter, r *http.Request) {
	d, err := facility.ParseDomain(r.PathValue("domain"))
	if err != nil {
		writeErr(w, http.StatusBadRequest, "domain: "+err.Error(), "write level=value, such as rack=r01-k01")
		return
	}
	found, err := c.store.ReleaseHold(d.String())
	if err != nil {
		writeErr(w, http.StatusBadGateway, err.Error(), "")
		return
	}
	if !found {
		_, fac := c.files.get()
		inFile := false
		for _, h := range fac.Holds {
			inFile = inFile || h.Domain == d
		}
		hint := ""
		if inFile {
			hint = "this hold is in the facility file: remove it there and reload (SIGHUP)"
		}
		writeErr(w, http.StatusNotFound, fmt.Sprintf("no run-time hold on %s", d), hint)
		return
	}
	c.log.Info("hold released", "domain", d.String(), "by", caller(r))
	out := map[string]string{"released": d.String()}
	if warn := c.awaitView(r.Context()); warn != "" {
		out["warning"] = warn
	}
	httpjson.WriteIndented(w, http.StatusOK, out)
}

// postReload reads the catalog and facility files again, as SIGHUP does.
// A refused reload answers 409 (too many stops: confirm) or 422 (a bad
// file), and the files in force stay.
func (c *Controller) postReload(w http.ResponseWriter, r *http.Request) {
	var req controllerapi.ReloadRequest
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil {
			writeErr(w, http.StatusBadRequest, "body: "+err.Error(), `send {"confirm": true|false}`)
			return
		}
	}
	var err error
	if req.Confirm {
		err = c.ReloadConfirmed()
	} else {
		err = c.Reload()
	}
	switch {
	case errors.Is(err, ErrTooManyStops):
		writeErr(w, http.StatusConflict, err.Error(), `check the catalog; if the stops are meant, send {"confirm": true}`)
		return
	case err != nil:
		writeErr(w, http.StatusUnprocessableEntity, err.Error(), "fix the file; the previous catalog and facility stay in force")
		return
	}
	c.log.Info("reloaded catalog and facility", "confirmed", req.Confirm, "by", caller(r))
	cat, at := c.files.loaded()
	cv := controllerapi.CatalogView{Models: redact(cat.Models), LoadedAt: at, Warnings: cat.Warnings()}
	httpjson.WriteIndented(w, http.StatusOK, cv)
}

// putLabels writes Nomad dynamic node metadata, which wins over the client
// file's meta and survives client restarts. Every label is checked
// (observe.CheckLabel: names as in a domain name, numbers in range) before
// anything is written; a bad one refuses the whole request, naming it.
func (c *Controller) putLabels(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("node")
	var req controllerapi.LabelsRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, "body: "+err.Error(), `send {"set": {"rack": "r01-k01"}, "unset": ["pdu"]}`)
		return
	}
	labelHint := "labels: " + strings.Join(observe.LabelNames(), ", ") +
		"; names are letters, digits, '-', '_' and '.' (at most 63), base_watts a number of watts, hcas a list of HCAs as NCCL_IB_HCA takes it"
	meta := map[string]*string{}
	var problems []string
	for _, k := range slices.Sorted(maps.Keys(req.Set)) {
		v := req.Set[k]
		if err := observe.CheckLabel(k, v); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		meta[observe.Labels[k]] = &v
	}
	for _, k := range req.Unset {
		key, ok := observe.Labels[k]
		if !ok {
			problems = append(problems, fmt.Sprintf("unset: unknown label %.64q", k))
			continue
		}
		if _, set := req.Set[k]; set {
			problems = append(problems, fmt.Sprintf("label %s: both set and unset", k))
			continue
		}
		meta[key] = nil
	}
	if len(problems) > 0 {
		writeErr(w, http.StatusBadRequest, strings.Join(problems, "; "), labelHint)
		return
	}
	if len(meta) == 0 {
		writeErr(w, http.StatusBadRequest, "nothing to set or unset", "")
		return
	}
	id, names := c.obs.nodeID(name)
	if id == "" {
		writeErr(w, http.StatusNotFound, fmt.Sprintf("no node %q", name), suggest.Hint(name, names))
		return
	}
	qo := *c.qo
	ctx, cancel := context.WithTimeout(r.Context(), callTimeout)
	defer cancel()
	start := time.Now()
	resp, err := c.nomad.Nodes().Meta().Apply(&api.NodeMetaApplyRequest{NodeID: id, Meta: meta}, (&qo).WithContext(ctx))
	if err != nil {
		writeErr(w, http.StatusBadGateway, "nomad: "+err.Error(), "")
		return
	}
	out := map[string]any{"node": name, "set": req.Set, "unset": req.Unset}
	// The client has the new metadata; Nomad's servers, whose node this
	// controller watches, get it with the client's next node update.
	// Answer once the view shows it, so that the next read does too.
	want := wantMeta(meta, resp)
	warn := ""
	if !waitUntil(r.Context(), labelWait, func() (bool, <-chan struct{}) {
		return c.obs.nodesShow(func(s snapshot) bool { return metaShows(s.nodes[id], want) })
	}) {
		warn = fmt.Sprintf("node %s has the new labels, but Nomad's servers did not show them within %s "+
			"(a Nomad client sends its metadata with its next node update): the controller shows them once they do", name, labelWait)
	} else {
		warn = c.awaitView(r.Context())
	}
	if warn != "" {
		out["warning"] = warn
	}
	c.log.Info("node labels", "node", name, "set", req.Set, "unset", req.Unset, "by", caller(r), "shown_after", time.Since(start).Round(time.Millisecond), "warning", warn)
	httpjson.WriteIndented(w, http.StatusOK, out)
}

// wantMeta is, for each key of a metadata write, the value the node's meta
// has after it (nil: none): the client's merged meta in its answer (an
// unset dynamic key may uncover the client file's value), else the write's
// own values.
func wantMeta(meta map[string]*string, resp *api.NodeMetaResponse) map[string]*string {
	want := make(map[string]*string, len(meta))
	for k, v := range meta {
		want[k] = v
		if resp != nil && resp.Meta != nil {
			want[k] = nil
			if got, ok := resp.Meta[k]; ok {
				want[k] = &got
			}
		}
	}
	return want
}

// metaShows reports whether node n's meta has the values in want.
func metaShows(n *api.Node, want map[string]*string) bool {
	if n == nil {
		return false
	}
	for k, v := range want {
		got, ok := n.Meta[k]
		if ok != (v != nil) || (ok && got != *v) {
			return false
		}
	}
	return true
}

// How long a write waits for this controller's view to show it before it
// answers (with a warning: the write is done either way).
const (
	// labelWait bounds the wait for Nomad's servers to show a node's new
	// metadata: a Nomad client sends it with its next node update, 5 to
	// 10 s after the change (1 s in dev mode).
	labelWait = 15 * time.Second
	// viewWait bounds the wait for the next view once Nomad shows the
	// write: a pass (or a standby's view refresh) runs about 200 ms after
	// a change, later when a pass is under way.
	viewWait = 10 * time.Second
)

// waitUntil waits until check reports true (it is checked again each
// time the channel it returns with false is closed), for at most d or
// until ctx ends; it reports whether check held.
func waitUntil(ctx context.Context, d time.Duration, check func() (bool, <-chan struct{})) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		ok, changed := check()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// awaitView asks for a pass (a standby: a view refresh) after a write that
// Nomad already shows, and waits, at most viewWait, for the view built by
// it, so that the write's answer comes once the read API shows it. It
// returns "" then, else a warning for the answer.
func (c *Controller) awaitView(ctx context.Context) string {
	target := c.views.nextGen()
	c.kick()
	if waitUntil(ctx, viewWait, func() (bool, <-chan struct{}) { return c.views.shows(target) }) {
		return ""
	}
	return fmt.Sprintf("done in Nomad, but the controller has not rebuilt its view within %s (a pass under way, or passes deferred: see its log); "+
		"its reads show the change after its next pass", viewWait)
}
