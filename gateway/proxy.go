package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/llmgw/gateway/routing"
	"github.com/llmgw/llmgw/internal/bounded"
	"github.com/llmgw/llmgw/internal/httpjson"
	"github.com/llmgw/llmgw/internal/jsonscan"
)

// ReplicaHeader names the replica that answered, on every proxied response.
const ReplicaHeader = "X-Llmgw-Replica"

// retryStatus are the answers that say "this replica cannot serve now"
// rather than "this request is wrong": another replica may take it.
func retryStatus(code int) bool {
	return code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout
}

// hopHeaders are the hop-by-hop headers a proxy must not forward (RFC 9110
// section 7.6.1).
var hopHeaders = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// copyBufs hold a response on its way to the client: an SSE event is a few
// hundred bytes, so 8 KiB a stream is plenty and bounds what long streams
// hold.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 8<<10); return &b }}

// teeBufs hold a copy of a JSON answer, with keys on, for its usage: a
// completion's answer is a few hundred bytes to a few KiB.
var teeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// route is one OpenAI route the gateway proxies: its path, the largest
// body it takes and the setting that sets it (its configuration
// attribute, named in the 413: the command maps it to its flag).
type route struct {
	path    string
	maxBody int64
	setting string
}

// proxy routes one OpenAI request by its body's model.
func (g *Gateway) proxy(w http.ResponseWriter, r *http.Request, rt *route) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, http.MethodPost)
		return
	}
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		// No OpenAI POST route has a query string, and engines have
		// dropped the connection on a long one: it never reaches them.
		writeError(w, http.StatusBadRequest, "invalid_request_error", "query_not_allowed", "",
			"POST "+rt.path+" takes no query string: the gateway refuses one on the OpenAI routes (send every parameter in the JSON body).")
		g.m.request("", http.StatusBadRequest)
		return
	}
	start := g.now()
	g.m.inFlight.Inc()
	x := &exchange{g: g, w: w, r: r, start: start}
	// What the request holds is given back when it ends (exit): when the
	// handler returns, or when a detached rest does.
	defer x.exit()

	var key *Key
	if g.auth != nil {
		if key = g.authenticate(w, r); key == nil {
			return
		}
	}

	// The whole body is read, within the route's limit and the body-read
	// deadline, and checked before any replica sees it.
	setReadDeadline(w, start.Add(g.bodyTimeout))
	body, err := readBody(r.Body, r.ContentLength, rt.maxBody, &g.bud)
	if err != nil {
		// The deadline stays: what net/http reads of the body after the
		// answer is bounded by it too.
		g.m.request("", g.bodyError(w, r, rt, err))
		return
	}
	// An answer streams for as long as it takes.
	setReadDeadline(w, time.Time{})
	x.body = body
	model, err := jsonscan.Check(body.prefix, g.maxDepth)
	if err != nil {
		g.m.request("", g.bodyError(w, r, rt, err))
		return
	}

	// The model may name one of a model's LoRA adapters (adapters.go).
	t := g.tbl.Load()
	base, ad := t.resolve(model)
	sent := model
	if key != nil && !ad.allowedBy(key, model) {
		g.refuseModel(w, key, model)
		return
	}
	ms := t.models[base]
	if ms == nil {
		writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found", "model",
			fmt.Sprintf("The model `%s` does not exist.", model))
		g.m.request("", http.StatusNotFound)
		return
	}
	adapters := len(t.listed[base].Adapters) > 0
	if adapters && jsonscan.Member(body.prefix, "lora") >= 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "lora_not_allowed", "lora",
			fmt.Sprintf("The model `%s` has LoRA adapters, and the gateway chooses which one answers from the request's model: name the adapter as the model (`adapter` or `%s:adapter`), without a \"lora\" member.", base, base))
		g.m.request(base, http.StatusBadRequest)
		return
	}
	model = base
	x.adapters, x.adapter, x.asked = adapters, ad, sent
	// What the limits and the choice to stream read of the body, read
	// once (the stream's usage option that admit may add changes none).
	d := detacher(w)
	var fields requestFields
	if key != nil || d != nil {
		fields = readRequestFields(body.prefix)
	}
	if key != nil {
		if x.ac = g.admit(w, r, key, body, fields, model); x.ac == nil {
			return
		}
	}
	ms.arrive(start)
	x.ms = ms
	p := t.pools[model]
	if p == nil || ms.q.n.Load() > 0 {
		// No replica, or requests held before this one: it waits its turn.
		var ok bool
		if p, x.holdDone, ok = g.holdFor(w, r, t, ms, start); !ok {
			return
		}
	}
	x.p = p
	x.req = routing.Request{Ctx: r.Context(), Key: p.policy.Key(r.URL.Path, body.prefix), Tried: x.tried[:0], Replicas: &p.set, Table: x}
	x.dispatched = g.now()
	if d != nil && fields.stream {
		// A stream is sent as it comes: on fasthttp's server, from
		// another goroutine than its connection's (NewFastServer).
		if x.detached = d.Detach(x.sendDetached); x.detached {
			return
		}
	}
	x.send()
}

// detacher is w's Detach (fastWriter's), through Unwrap; nil without one.
func detacher(w http.ResponseWriter) interface{ Detach(func()) bool } {
	for {
		switch v := w.(type) {
		case interface{ Detach(func()) bool }:
			return v
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return nil
		}
	}
}

// sendDetached is send, detached from the handler: it gives back what
// the request holds when it is done.
func (x *exchange) sendDetached() {
	defer x.release()
	x.send()
}

// exit is the handler's end: what the request holds is given back, unless
// its rest was detached (sendDetached gives it back then).
func (x *exchange) exit() {
	if !x.detached {
		x.release()
	}
}

// release gives back what the request holds, in the reverse of the order
// it took it: its place in a hold, the model's count of it, the key's
// reservation (settled with the answer's usage), its body's memory, the
// count of requests in flight.
func (x *exchange) release() {
	if x.holdDone != nil {
		x.holdDone()
	}
	if x.ms != nil {
		x.ms.outstanding.Add(-1)
	}
	if x.ac != nil {
		x.ac.settle()
	}
	if x.body != nil {
		x.body.release()
	}
	x.g.m.inFlight.Dec()
}

// exchange is one request on its way to a replica and its answer back:
// what the handler settled before routing (the model, the body, the key's
// account, when it arrived and when it was first dispatched), and what the
// retry loop carries from one attempt to the next.
type exchange struct {
	g                 *Gateway
	w                 http.ResponseWriter
	r                 *http.Request
	ms                *modelState
	body              *reqBody
	ac                *account // nil without keys
	start, dispatched time.Time

	// p is the model's pool the request is routed among: the one it was
	// dispatched to, or the table's now after a policy waited (Replicas).
	p *pool
	// req is the request as p's policy sees it: its key, the replicas
	// tried (in tried's room while they fit).
	req   routing.Request
	tried [DefaultAttempts]*routing.State

	// holdDone gives back the request's place among those released from
	// a hold; nil when it was not held.
	holdDone func()
	// detached: the rest runs apart from the handler (sendDetached).
	detached bool

	lastErr error // the last attempt's error
	// last is the last "cannot serve" answer, kept to pass on (its resp
	// nil when there is none); lastEp whose it is, lastRoute why lastEp
	// was chosen.
	last      reply
	lastEp    *endpoint
	lastRoute string

	// brokenErr is why the answer finish was sending broke off.
	brokenErr error

	// adapters says the model has LoRA adapters: every attempt's body is
	// written for its replica's engine (bodyFor). adapter is the one the
	// request asked for (nil: the base model), under the name asked.
	adapters bool
	adapter  *adapterRef
	asked    string
	// router is the adapter router that counted the attempt in flight.
	router *routing.Adapters

	route string // why the last attempt's replica was chosen (RouteHeader)
}

// Replicas is routing.Table's: the model's pool in the routing table now
// (the one it had when the model has none now), which the exchange routes
// among from then on.
func (x *exchange) Replicas() *routing.Set {
	if np := x.g.tbl.Load().pools[x.ms.name]; np != nil {
		x.p = np
	}
	return &x.p.set
}

// send tries the model's replicas, as its policy chooses them, up to the
// gateway's attempts, until one answers, and sends that answer to the
// client; when none can, it passes the last "cannot serve" answer on or
// answers 503 itself.
func (x *exchange) send() {
	g, r, model := x.g, x.r, x.ms.name
	for n := 1; ; n++ {
		var ep *endpoint
		var c routing.Choice
		if n <= g.attempts {
			// The policy counts the request in flight on its choice;
			// every way out of this attempt releases it.
			var ok bool
			if c, ok = x.pick(); ok {
				ep = x.p.eps[c.Index]
			}
		}
		if ep == nil {
			x.giveUp()
			return
		}
		probe := c.Probe
		x.route = c.Route
		if x.last.resp != nil {
			x.last.discard()
			x.last, x.lastEp, x.lastRoute = reply{}, nil, ""
		}
		x.req.Tried = append(x.req.Tried, ep.State)
		data, err := x.bodyFor(ep)
		if err != nil {
			// The replica does not serve the asked adapter, or its list
			// of adapters cannot be read: another replica may.
			x.releaseAttempt(ep)
			ep.br.Abandon(probe)
			g.m.attempts.WithLabelValues(model, "adapter").Inc()
			g.log.Debug("replica passed over for the adapter", "model", model, "adapter", x.asked, "replica", ep.inst.Replica, "endpoint", ep.inst.Address, "error", err)
			x.lastErr = fmt.Errorf("replica %s: adapter %s: %w", ep.inst.Replica, x.asked, err)
			continue
		}
		start := g.now()
		if x.ac != nil {
			x.ac.sent = true
		}
		if data == nil {
			data = x.body.prefix
		}
		out := fasthttp.AcquireRequest()
		g.outRequest(out, r, ep, data)
		a := reply{resp: fasthttp.AcquireResponse()}
		var sent bool
		a.body, sent, err = g.upstream.Do(r.Context(), ep.inst.Address, out, a.resp)
		fasthttp.ReleaseRequest(out)
		if err != nil {
			fasthttp.ReleaseResponse(a.resp)
			x.releaseAttempt(ep)
			if r.Context().Err() != nil {
				// The client went away: no fault of the replica's.
				ep.br.Abandon(probe)
				g.m.attempts.WithLabelValues(model, "cancelled").Inc()
				g.m.request(model, statusClientClosed)
				return
			}
			// No connection, a reset before any answer, a timeout: the
			// replica's failure.
			ep.br.failure(probe, g.now())
			g.m.attempts.WithLabelValues(model, "error").Inc()
			g.log.Debug("attempt failed", "model", model, "replica", ep.inst.Replica, "endpoint", ep.inst.Address, "attempt", n, "error", err)
			if sent {
				// The request reached the replica, which then failed
				// without answering: it may be what made it fail, and is
				// not tried on another one.
				x.unanswered(ep, err)
				return
			}
			x.lastErr = err
			continue
		}
		g.m.upstreamOf(x.ms).Observe(g.now().Sub(start).Seconds())
		if x.adapterGone(ep, &a) {
			// The engine does not hold the adapter its list held when it
			// was read (it restarted since): nothing was served, and
			// another replica may.
			ep.br.success(probe)
			x.releaseAttempt(ep)
			g.m.attempts.WithLabelValues(model, "adapter").Inc()
			g.log.Debug("replica passed over for the adapter", "model", model, "adapter", x.asked, "replica", ep.inst.Replica, "endpoint", ep.inst.Address, "answer", a.status())
			x.lastErr = fmt.Errorf("replica %s: adapter %s: %w (it answered %d)", ep.inst.Replica, x.asked, errAdapterNotLoaded, a.status())
			continue
		}
		if code := a.resp.StatusCode(); retryStatus(code) {
			// "Cannot serve now" (502, 503, 504): the replica's failure,
			// and another replica may take the request.
			ep.br.failure(probe, g.now())
			g.m.attempts.WithLabelValues(model, "status").Inc()
			x.releaseAttempt(ep)
			g.log.Debug("attempt answered "+strconv.Itoa(code)+" "+http.StatusText(code), "model", model, "replica", ep.inst.Replica, "endpoint", ep.inst.Address, "attempt", n)
			x.last, x.lastEp, x.lastRoute = a, ep, x.route
			continue
		}
		// Any other answer, a 4xx or a 500 included, is the engine
		// answering the request: it is alive. That is no failure of the
		// replica's, so no client can open a breaker with requests the
		// engine refuses (docs/gateway.md, "Circuit breakers").
		ep.br.success(probe)
		outcome := "ok"
		if a.resp.StatusCode() >= 500 {
			outcome = "status"
		}
		if outcome == "ok" {
			g.m.attemptOK(x.ms)
		} else {
			g.m.attempts.WithLabelValues(model, outcome).Inc()
		}
		broken, told := x.finish(ep, a)
		x.releaseAttempt(ep)
		if broken {
			// The replica failed mid-response: the client must not take
			// a cut-off answer for a whole one. A stream was told with an
			// error event and ends cleanly; any other answer is cut.
			ep.br.failure(false, g.now())
			g.m.attempts.WithLabelValues(model, "broken").Inc()
			x.poison(ep, stageMidAnswer, x.brokenErr)
			x.body.release()
			if told {
				return
			}
			panic(http.ErrAbortHandler)
		}
		return
	}
}

// pick chooses the replica of the next attempt: the adapter's home set
// for a request that names an adapter (routing.Adapters), else the model's
// policy.
func (x *exchange) pick() (routing.Choice, bool) {
	if x.adapter != nil {
		if r := x.g.tbl.Load().adapterRouters[x.ms.name]; r != nil {
			x.router = r
			return r.Pick(x.adapter.ad.Name, &x.p.set, x.req.Tried)
		}
	}
	return x.p.policy.Pick(&x.req)
}

// releaseAttempt ends the attempt's request on ep: its count there, and
// the adapter's where the adapter's router counted it.
func (x *exchange) releaseAttempt(ep *endpoint) {
	if x.router != nil {
		x.router.Done(x.adapter.ad.Name, ep.State)
		x.router = nil
	}
	ep.Release()
}

// The stages a replica failed at, after a request reached it
// (llmgw_gateway_poison_requests_total's stage label).
const (
	stageBeforeAnswer = "before_answer"
	stageMidAnswer    = "mid_answer"
)

// unanswered answers a request that reached ep, which then failed
// without answering: 504 after a timeout, 502 otherwise, an event and
// a count naming the model, the replica and the key (never the body).
func (x *exchange) unanswered(ep *endpoint, err error) {
	g, model := x.g, x.ms.name
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		// The replica is slow, not dead: the request is not retried
		// (another replica would be as slow, or the request is why), and
		// not counted as a poison request.
		writeError(x.w, http.StatusGatewayTimeout, "server_error", "replica_timeout", "",
			fmt.Sprintf("Replica %s of `%s` did not answer in time: %v. The request is not tried on another replica.", ep.inst.Replica, model, err))
		g.m.request(model, http.StatusGatewayTimeout)
		return
	}
	x.poison(ep, stageBeforeAnswer, err)
	writeError(x.w, http.StatusBadGateway, "server_error", "replica_failed", "",
		fmt.Sprintf("Replica %s of `%s` failed after it received the request, before answering (%v). The request is not tried on another replica: it may be what made the replica fail.", ep.inst.Replica, model, err))
	g.m.request(model, http.StatusBadGateway)
}

// poison records a request after which its replica failed: a warning
// and llmgw_gateway_poison_requests_total, naming the model, the replica
// and the API key, if any, but nothing of the request's content.
func (x *exchange) poison(ep *endpoint, stage string, err error) {
	keyName := ""
	if x.ac != nil {
		keyName = x.ac.key.Name
	}
	x.g.m.poison.WithLabelValues(x.ms.name, keyName, stage).Inc()
	x.g.log.Warn("replica failed after a request reached it; the request is not retried", "model", x.ms.name, "replica", ep.inst.Replica,
		"endpoint", ep.inst.Address, "key", keyName, "stage", stage, "path", x.r.URL.Path, "body_bytes", len(x.body.prefix), "error", err)
}

// giveUp answers when no replica is left to try: the last "cannot serve"
// answer when one came, nothing when the client went away, else 503.
func (x *exchange) giveUp() {
	g, model := x.g, x.ms.name
	switch {
	case x.last.resp != nil:
		// Every replica tried answered "cannot serve": pass the last
		// answer on.
		x.route = x.lastRoute
		x.finish(x.lastEp, x.last)
	case x.r.Context().Err() != nil:
		g.m.request(model, statusClientClosed)
	default:
		ra := x.p.retryAfter(g.now(), g.noReplica)
		setRetryAfter(x.w.Header(), ra)
		msg := fmt.Sprintf("No replica of `%s` can take the request now (every one is failing or its circuit breaker is open); retry later.", model)
		if x.lastErr != nil {
			msg = fmt.Sprintf("No replica of `%s` answered: %v", model, x.lastErr)
		}
		writeError(x.w, http.StatusServiceUnavailable, "service_unavailable", "no_healthy_replica", "model", msg)
		g.m.request(model, http.StatusServiceUnavailable)
	}
}

// statusClientClosed is recorded for requests whose client went away
// before the answer was sent (nginx's 499).
const statusClientClosed = 499

// outRequest writes into out r as sent to ep, with body: its method,
// target and headers but the hop-by-hop ones (and those its Connection
// header names), the key when the gateway checks keys, and the client's
// address added to X-Forwarded-For.
func (g *Gateway) outRequest(out *fasthttp.Request, r *http.Request, ep *endpoint, body []byte) {
	h := &out.Header
	// No header the client did not send: fasthttp would add a
	// Content-Type to a body without one.
	h.SetNoDefaultContentType(true)
	h.SetMethod(r.Method)
	h.SetRequestURI(r.URL.RequestURI())
	h.SetHost(ep.inst.Address)
	var named []string // by the client's Connection header
	for _, c := range r.Header["Connection"] {
		for f := range strings.SplitSeq(c, ",") {
			named = append(named, http.CanonicalHeaderKey(strings.TrimSpace(f)))
		}
	}
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	forward := err == nil
	for k, vs := range r.Header {
		switch {
		case hopHeaders[k], k == "Content-Length", k == "Host", forward && k == "X-Forwarded-For":
			continue
		case g.auth != nil && (k == "Authorization" || k == "Api-Key"):
			// The client's key is the gateway's to check, not the
			// replica's to see.
			continue
		case len(named) > 0 && slices.Contains(named, k):
			continue
		}
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	if forward {
		if prior := r.Header["X-Forwarded-For"]; len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		h.Set("X-Forwarded-For", ip)
	}
	out.SetBodyRaw(body)
}

// reply is a replica's answer: its status and headers, read, and its
// body as it comes.
type reply struct {
	resp *fasthttp.Response
	body io.ReadCloser
}

// status is the answer's status code.
func (a reply) status() int { return a.resp.StatusCode() }

// length is the body's length as the answer's head gave it, -1 when it
// did not (chunked, or until the connection closes).
func (a reply) length() int64 { return max(int64(a.resp.Header.ContentLength()), -1) }

// close closes the body and gives the head back to its pool.
func (a reply) close() {
	_ = a.body.Close()
	fasthttp.ReleaseResponse(a.resp)
}

// discard reads a little of an unwanted answer, so its connection can
// be reused, and closes it.
func (a reply) discard() {
	_, _ = io.CopyN(io.Discard, a.body, 64<<10)
	a.close()
}

// finish sends ep's answer a to the client: its head (writeHead), then
// its body as it comes (copyAnswer), read on the way (answerTap) for the
// key's usage and the engine's prompt cache, which recordAnswer takes once
// the answer is whole; then the request's metrics. It reports whether the
// replica failed mid-response (the caller aborts the client's connection)
// and, if so, whether the client was told (a stream's error event).
func (x *exchange) finish(ep *endpoint, a reply) (broken, told bool) {
	defer a.close()
	x.writeHead(ep, a)
	tap := x.tapAnswer(a)
	code, whole, broken, told := x.copyAnswer(ep, a, &tap)
	if whole {
		x.recordAnswer(ep, &tap)
	}
	tap.release()
	g := x.g
	g.m.answered(x.ms, code)
	g.m.durationOf(x.ms).Observe(g.now().Sub(x.start).Seconds())
	return broken, told
}

// writeHead writes a's status and headers to the client: the replica's
// own but hop-by-hop and CORS ones (and those its Connection header
// names), each replacing any of the same name set before, with the
// replica's name and the route that chose it, and a Retry-After on a 503
// that has none. On fasthttp's server they go from the replica's head to
// the client's as bytes (headerAdder).
func (x *exchange) writeHead(ep *endpoint, a reply) {
	hd := &a.resp.Header
	var named []string // by the replica's Connection header
	if c := hd.Peek("Connection"); len(c) > 0 {
		for f := range strings.SplitSeq(string(c), ",") {
			named = append(named, http.CanonicalHeaderKey(strings.TrimSpace(f)))
		}
	}
	setReplica := ep.inst.Replica != ""
	keep := func(k []byte) bool {
		switch {
		// CORS is the gateway's policy (cors.go), never the engine's.
		case hopHeaders[string(k)], bytes.HasPrefix(k, []byte("Access-Control-")):
			return false
		case string(k) == RouteHeader, setReplica && string(k) == ReplicaHeader:
			return false // the gateway's to say
		}
		return len(named) == 0 || !slices.Contains(named, string(k))
	}
	h := x.w.Header()
	if ha := headerAdder(x.w); ha != nil {
		for k, v := range hd.All() {
			if keep(k) {
				ha.AddHeader(k, v)
			}
		}
		if setReplica {
			ha.SetHeader(ReplicaHeader, ep.inst.Replica)
		}
		ha.SetHeader(RouteHeader, x.route)
	} else {
		var replaced []string
		for k, v := range hd.All() {
			if !keep(k) {
				continue
			}
			key := headerKey(k)
			if !slices.Contains(replaced, key) {
				delete(h, key)
				replaced = append(replaced, key)
			}
			h[key] = append(h[key], string(v))
		}
		if setReplica {
			h.Set(ReplicaHeader, ep.inst.Replica)
		}
		h.Set(RouteHeader, x.route)
	}
	if a.status() == http.StatusServiceUnavailable && len(hd.Peek("Retry-After")) == 0 && h.Get("Retry-After") == "" {
		setRetryAfter(h, time.Second)
	}
	x.w.WriteHeader(a.status())
}

// headerWriter writes an answer's header fields straight into the
// server's answer (fastWriter's), with no http.Header between.
type headerWriter interface {
	AddHeader(k, v []byte)
	SetHeader(k, v string)
}

// headerAdder is w's headerWriter (fastWriter's), through Unwrap; nil
// without one.
func headerAdder(w http.ResponseWriter) headerWriter {
	for {
		switch v := w.(type) {
		case headerWriter:
			return v
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return nil
		}
	}
}

// answerTap is what an answer is read for on its way to the client: with
// keys on, the key's usage; for a 2xx completion, what the engine's prompt
// cache held of its prompt (with keys on or off). An event stream goes
// through a usage filter (which leaves out the usage chunk the gateway
// asked for); a JSON answer of a known length up to maxEvent is copied,
// and read whole at its end.
type answerTap struct {
	events  bool      // an event stream
	observe bool      // read for the engine's prompt cache
	sse     *sseUsage // the usage filter of an event stream, if read
	sseOut  *[]byte   // what the filter passes on, per read
	tee     []byte    // the copy of a JSON answer, while teeOK
	teeOK   bool
	teeBuf  *[]byte // the pooled buffer tee is from
}

// tapAnswer sets up what a is read for, and gives the key's account
// the answer's status.
func (x *exchange) tapAnswer(a reply) answerTap {
	ac := x.ac
	code := a.status()
	ok2xx := code >= 200 && code < 300
	t := answerTap{
		events:  bytes.HasPrefix(a.resp.Header.ContentType(), []byte("text/event-stream")),
		observe: ok2xx && x.cacheObserved(),
	}
	if ac != nil || t.observe {
		t.teeBuf = teeBufs.Get().(*[]byte)
		t.tee = (*t.teeBuf)[:0]
	}
	if ac != nil {
		ac.status = code
	}
	if ok2xx && (ac != nil || t.observe) {
		switch {
		case t.events && ac != nil:
			t.sse, t.sseOut = &ac.sse, &ac.out
			// A length the replica promised cannot lose an event.
			t.sse.strip = ac.strip && a.length() < 0
		case t.events:
			t.sse, t.sseOut = &sseUsage{}, new([]byte)
		case a.length() <= maxEvent:
			t.teeOK = true
		}
	}
	return t
}

// pass returns what of data, one read of the answer (the last when eof),
// goes to the client, reading it on the way.
func (t *answerTap) pass(data []byte, eof bool) []byte {
	switch {
	case t.sse != nil:
		if eof {
			*t.sseOut = t.sse.rest(t.sse.feed(data, (*t.sseOut)[:0]))
		} else {
			*t.sseOut = t.sse.feed(data, (*t.sseOut)[:0])
		}
		return *t.sseOut
	case t.teeOK && len(data) > 0:
		if len(t.tee)+len(data) > maxEvent {
			t.teeOK, t.tee = false, t.tee[:0]
		} else {
			t.tee = append(t.tee, data...)
		}
	}
	return data
}

// held is what the usage filter holds back of an answer that broke off.
func (t *answerTap) held() []byte {
	if t.sse == nil {
		return nil
	}
	return t.sse.rest(nil)
}

// release gives the copy's buffer back to its pool (unless it grew large).
func (t *answerTap) release() {
	if t.teeBuf != nil && cap(t.tee) <= 64<<10 {
		*t.teeBuf = t.tee[:0]
		teeBufs.Put(t.teeBuf)
	}
}

// copyAnswer copies a's body to the client through tap, flushing after
// every read for event streams and bodies of unknown length, and records
// its first byte (firstByte: a 2xx answer's time to it from dispatched,
// later than start by any hold, is the model's TTFT sample). It returns
// the status to record and how the copy ended: whole (read to its end and
// written), broken (the replica failed mid-answer; told: an event stream
// got an error event), or neither (the client went away).
func (x *exchange) copyAnswer(ep *endpoint, a reply, tap *answerTap) (code int, whole, broken, told bool) {
	g, w := x.g, x.w
	code = a.status()
	flush := a.length() < 0 || tap.events
	rc := http.NewResponseController(w)
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	first := true
	for {
		n, rerr := a.body.Read(buf)
		data := tap.pass(buf[:n], errors.Is(rerr, io.EOF))
		if len(data) > 0 {
			if _, werr := w.Write(data); werr != nil {
				return statusClientClosed, false, false, false
			}
			if flush {
				if err := rc.Flush(); err != nil {
					return statusClientClosed, false, false, false
				}
			}
			if first {
				first = false
				g.firstByte(x.ms, x.start, x.dispatched, code)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			if rest := tap.held(); len(rest) > 0 {
				_, _ = w.Write(rest)
			}
			if x.r.Context().Err() != nil {
				return statusClientClosed, false, false, false
			}
			x.brokenErr = rerr
			if tap.events && a.length() < 0 && code >= 200 && code < 300 {
				// An event stream ends with an error event in OpenAI's
				// shape, which its clients raise, rather than a cut that
				// looks like a network fault.
				_, _ = w.Write(midStreamError(ep.inst.Replica, rerr))
				_ = rc.Flush()
				return http.StatusBadGateway, false, true, true
			}
			return code, false, true, false
		}
	}
	if !flush {
		// The whole answer is written: send it now, before the
		// bookkeeping that follows (usage, metrics, the replica's
		// accounting), rather than when the handler returns. Only a body
		// of known length gets here, so this adds no chunked framing.
		_ = rc.Flush()
	}
	if first {
		g.firstByte(x.ms, x.start, x.dispatched, code)
	}
	return code, true, false, false
}

// recordAnswer gives a whole answer's usage to the key's account, when
// keys are on, and what it said of the engine's prompt cache to ep's
// counters: from a JSON answer's "usage" (and llama.cpp's "timings"), or
// an event stream's usage chunk.
func (x *exchange) recordAnswer(ep *endpoint, tap *answerTap) {
	var u Usage
	var found bool
	var cache cacheUse
	switch {
	case tap.sse != nil:
		u, found, cache = tap.sse.usage, tap.sse.found, tap.sse.cache
	case tap.teeOK:
		u, found, cache = answerUsage(tap.tee)
	}
	if x.ac != nil {
		x.ac.usage, x.ac.found = u, found
	}
	if tap.observe {
		x.g.observeCache(ep, cache)
	}
}

// cacheObserved reports whether the request's answer is read for the
// engine's prompt cache: a completion's (chat or not).
func (x *exchange) cacheObserved() bool {
	p := x.r.URL.Path
	return p == "/v1/chat/completions" || p == "/v1/completions"
}

// midStreamError is the event that ends a stream whose replica failed in
// the middle of it: OpenAI's error object as a data event.
func midStreamError(replica string, err error) []byte {
	var e apiError
	e.Error.Type, e.Error.Code = "server_error", "replica_failed"
	e.Error.Message = "the replica serving this stream failed before it ended"
	if replica != "" {
		e.Error.Message = "replica " + replica + " failed before the stream ended"
	}
	e.Error.Message += ": " + err.Error()
	b, _ := json.Marshal(e)
	return append(append([]byte("\n\ndata: "), b...), "\n\n"...)
}

// firstByte records a response's first byte to the client.
func (g *Gateway) firstByte(ms *modelState, start, dispatched time.Time, code int) {
	now := g.now()
	g.m.ttfbOf(ms).Observe(now.Sub(start).Seconds())
	if code >= 200 && code < 300 {
		ms.win.ttft(now, now.Sub(dispatched))
	}
}

// bodyError answers a request whose body was refused (too large, too
// deep, not JSON, no model, too slow, the gateway's body memory spent),
// and returns the status sent.
func (g *Gateway) bodyError(w http.ResponseWriter, r *http.Request, rt *route, err error) int {
	switch {
	case errors.Is(err, errTooLarge):
		// The rest of the body is not read: the connection is closed
		// after the answer rather than drained.
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", "",
			bodyLimitError(rt.path, rt.maxBody, rt.setting))
		return http.StatusRequestEntityTooLarge
	case bounded.IsLimit(err):
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "",
			fmt.Sprintf("The request body's JSON is %v; the limit is the gateway's max_json_depth.", err))
		return http.StatusBadRequest
	case errors.Is(err, errBusy):
		setRetryAfter(w.Header(), time.Second)
		writeError(w, http.StatusServiceUnavailable, "service_unavailable", "gateway_busy",
			"", "The gateway is holding as many request bodies as it may; retry later.")
		return http.StatusServiceUnavailable
	case errors.Is(err, jsonscan.ErrNoModel), errors.Is(err, jsonscan.ErrModelNotString), errors.Is(err, jsonscan.ErrModelTwice):
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_model", "model", err.Error())
		return http.StatusBadRequest
	case errors.Is(err, jsonscan.ErrNotObject), errors.Is(err, jsonscan.ErrBadJSON):
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "", err.Error())
		return http.StatusBadRequest
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestTimeout, "invalid_request_error", "request_timeout", "",
			bodyTimeoutMessage(g.bodyTimeout, bodyTimeoutSetting))
		return http.StatusRequestTimeout
	case r.Context().Err() != nil:
		return statusClientClosed
	default:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_body", "", "reading the request body: "+err.Error())
		return http.StatusBadRequest
	}
}

func setRetryAfter(h http.Header, d time.Duration) {
	h.Set("Retry-After", strconv.Itoa(int(math.Ceil(max(d, time.Second).Seconds()))))
}

// apiError is OpenAI's error shape.
type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	httpjson.Write(w, status, newAPIError(typ, code, param, msg))
}

func newAPIError(typ, code, param, msg string) apiError {
	var e apiError
	e.Error.Message, e.Error.Type, e.Error.Code = msg, typ, code
	if param != "" {
		e.Error.Param = &param
	}
	return e
}

// errorJSON is writeError's body.
func errorJSON(typ, code, param, msg string) []byte {
	b, _ := json.Marshal(newAPIError(typ, code, param, msg))
	return b
}

// bodyTimeoutSetting is the setting that bounds an OpenAI route's body.
const bodyTimeoutSetting = "body_read_timeout"

// bodyTimeoutMessage is the 408's message for a body that did not arrive
// within d, which setting sets ("" for ServerBodyReadTimeout).
func bodyTimeoutMessage(d time.Duration, setting string) string {
	if setting == "" {
		return fmt.Sprintf("The request body did not arrive whole within %s.", d)
	}
	return fmt.Sprintf("The request body did not arrive whole within %s (the gateway's %s).", d, setting)
}

// BodyTimeout is the time a request for path has for its body, and the
// setting that sets it: Options.BodyReadTimeout (body_read_timeout) on the
// OpenAI routes, ServerBodyReadTimeout on the others (NewFastServer's
// BodyTimeouts).
func (g *Gateway) BodyTimeout(path string) (time.Duration, string) {
	if g.openAI[path] {
		return g.bodyTimeout, bodyTimeoutSetting
	}
	return ServerBodyReadTimeout, ""
}
