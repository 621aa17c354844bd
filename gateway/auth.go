package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// auth is the gateway's access control, present when Options.Keys is set:
// the keys in force, each key's limiter (kept across reloads by name), and
// this gateway's share of every key's limits.
type auth struct {
	src  KeySource
	log  *slog.Logger
	now  func() time.Time
	m    *authMetrics
	keys atomic.Pointer[KeySet] // nil until the first good read

	mu       sync.Mutex
	limiters map[string]*keyLimiter
	share    float64 // 0 < share <= 1
	lastErr  string
}

type authMetrics struct {
	requests   *prometheus.CounterVec
	tokens     *prometheus.CounterVec
	rejections *prometheus.CounterVec
	loaded     prometheus.Gauge
	reloads    *prometheus.CounterVec
	failing    prometheus.Gauge
	share      prometheus.Gauge
}

func newAuthMetrics(reg prometheus.Registerer) *authMetrics {
	m := &authMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_gateway_key_requests_total",
			Help: "Requests admitted per API key (authenticated, model allowed, within the limits): sent on to a replica, or held for one.",
		}, []string{"key"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_gateway_key_tokens_total",
			Help: "Tokens per API key, by kind (prompt, completion), from the answers' usage.",
		}, []string{"key", "kind"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_gateway_key_rejections_total",
			Help: "Requests refused per API key, by reason: unauthenticated (key \"\": 401), model_not_allowed (403), requests_per_minute, tokens_per_minute, concurrency (429).",
		}, []string{"key", "reason"}),
		loaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmgw_gateway_keys",
			Help: "API keys in force.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmgw_gateway_key_reloads_total",
			Help: "Reads of the key file or variable, by outcome: ok (the new keys are in force), error (refused: the keys in force stay).",
		}, []string{"outcome"}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmgw_gateway_key_reload_failing",
			Help: "1 when the last read of the keys failed and older keys (or none) are in force, else 0.",
		}),
		share: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llmgw_gateway_key_limit_share",
			Help: "The part of every key's limits this gateway enforces (1 alone; 1/N with N gateways sharing).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.tokens, m.rejections, m.loaded, m.reloads, m.failing, m.share)
	}
	m.share.Set(1)
	return m
}

// UpdateKeys installs a key set (err nil), or records why the keys could
// not be read (err set: the keys in force stay, and it is logged and
// counted).
func (g *Gateway) UpdateKeys(ks *KeySet, err error) {
	a := g.auth
	if a == nil {
		return
	}
	if err != nil {
		a.mu.Lock()
		a.lastErr = err.Error()
		a.mu.Unlock()
		in := "none (every request is refused until keys are read)"
		if cur := a.keys.Load(); cur != nil {
			in = fmt.Sprintf("%d keys from %s", cur.Len(), cur.Source)
		}
		a.log.Error("keys not reloaded: the keys in force stay", "error", err, "in_force", in)
		a.m.reloads.WithLabelValues("error").Inc()
		a.m.failing.Set(1)
		return
	}
	a.mu.Lock()
	lims := make(map[string]*keyLimiter, ks.Len())
	for _, k := range ks.keys {
		l := a.limiters[k.Name]
		if l == nil {
			l = &keyLimiter{}
		}
		l.configure(k, a.share)
		k.lim = l
		k.admitted = a.m.requests.WithLabelValues(k.Name)
		k.promptTokens = a.m.tokens.WithLabelValues(k.Name, "prompt")
		k.completionTokens = a.m.tokens.WithLabelValues(k.Name, "completion")
		lims[k.Name] = l
	}
	a.limiters = lims
	a.lastErr = ""
	a.keys.Store(ks)
	a.mu.Unlock()
	a.m.reloads.WithLabelValues("ok").Inc()
	a.m.failing.Set(0)
	a.m.loaded.Set(float64(ks.Len()))
	a.log.Info("keys loaded", "from", ks.Source, "keys", ks.Len())
	if g.synced.Load() {
		a.warnUnknown(g.tbl.Load())
	}
}

// warnUnknown logs each allowlisted model of the keys in force that t (the
// catalog: discovery and the model list) does not know. It runs when keys
// are loaded once the catalog has been read, and when it first is.
func (a *auth) warnUnknown(t *table) {
	ks := a.keys.Load()
	if ks == nil {
		return
	}
	for _, w := range ks.UnknownModels(func(m string) bool { return t.models[m] != nil }) {
		a.log.Warn("key allowlist names a model not in the catalog (the key file stands)", "warning", w)
	}
}

// SetLimitShare makes this gateway enforce 1/n of every key's limits: the
// part of n gateways sharing them. n below 1 counts as 1.
func (g *Gateway) SetLimitShare(n int) {
	a := g.auth
	if a == nil {
		return
	}
	share := 1 / float64(max(n, 1))
	a.mu.Lock()
	defer a.mu.Unlock()
	if share == a.share {
		return
	}
	a.share = share
	if ks := a.keys.Load(); ks != nil {
		for _, k := range ks.keys {
			k.lim.configure(k, share)
		}
	}
	a.m.share.Set(share)
	a.log.Info("key limits shared", "gateways", max(n, 1), "share", share)
}

// KeysLoaded reports whether keys are in force: with Options.Keys, once
// the first good set was read; without, always.
func (g *Gateway) KeysLoaded() bool { return g.auth == nil || g.auth.keys.Load() != nil }

// KeysError is why the keys could not be read last, "" when they were.
func (g *Gateway) KeysError() string {
	if g.auth == nil {
		return ""
	}
	g.auth.mu.Lock()
	defer g.auth.mu.Unlock()
	return g.auth.lastErr
}

// presentedKey is the secret a request carries: Authorization: Bearer
// KEY, else api-key: KEY (Azure OpenAI's clients).
func presentedKey(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
			return strings.TrimSpace(h[7:])
		}
		return ""
	}
	return r.Header.Get("Api-Key")
}

// authenticate returns the request's key, or answers 401 (no key, or one
// not in force) or 503 (no keys read yet) and returns nil.
func (g *Gateway) authenticate(w http.ResponseWriter, r *http.Request) *Key {
	a := g.auth
	ks := a.keys.Load()
	if ks == nil {
		setRetryAfter(w.Header(), g.noReplica)
		writeError(w, http.StatusServiceUnavailable, "service_unavailable", "keys_unavailable", "",
			"The gateway has not read its API keys yet; retry later.")
		g.m.request("", http.StatusServiceUnavailable)
		return nil
	}
	secret := presentedKey(r)
	var k *Key
	if secret != "" {
		k = ks.lookup(secret)
	}
	if k == nil {
		msg := "You didn't provide an API key. Send it as `Authorization: Bearer KEY`."
		if secret != "" {
			msg = "Incorrect API key provided."
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="llmgw"`)
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "", msg)
		a.m.rejections.WithLabelValues("", reasonUnauthenticated).Inc()
		g.m.request("", http.StatusUnauthorized)
		return nil
	}
	return k
}

// refuseModel answers 403 for a model the key may not use.
func (g *Gateway) refuseModel(w http.ResponseWriter, k *Key, model string) {
	writeError(w, http.StatusForbidden, "invalid_request_error", "model_not_allowed", "model",
		fmt.Sprintf("The API key %q may not use the model `%s`.", k.Name, model))
	g.auth.m.rejections.WithLabelValues(k.Name, reasonModel).Inc()
	label := ""
	if g.tbl.Load().models[model] != nil {
		label = model
	}
	g.m.request(label, http.StatusForbidden)
}

// account is one admitted request's reservation against its key, and
// what its answer reports of the usage.
type account struct {
	g      *Gateway
	key    *Key
	taken  float64
	sent   bool // an attempt reached the transport
	strip  bool // the gateway added include_usage: the usage chunk is the gateway's
	status int
	usage  Usage
	found  bool
	sse    sseUsage
	out    []byte
}

// admit reserves the request against k's limits (f is readRequestFields
// of its body): one request, a slot and its estimated tokens (the body's bytes / 4 for the prompt, max_tokens or
// the key's reserve_tokens for the completion). For a streaming
// body that did not ask for usage, it asks for it (the usage chunk is then
// kept from the client). It answers 429 with Retry-After when a limit is
// reached and returns nil.
func (g *Gateway) admit(w http.ResponseWriter, r *http.Request, k *Key, body *reqBody, f requestFields, model string) *account {
	ac := &account{g: g, key: k}
	est := int64(len(body.prefix)) / 4
	if r.URL.Path != "/v1/embeddings" {
		if f.maxTokens >= 0 {
			est += f.maxTokens
		} else {
			est += k.ReserveTokens
		}
		if f.stream && !f.includeUsage {
			if nb, ok := withIncludeUsage(body.prefix, f); ok {
				body.replace(nb)
				ac.strip = true
			}
		}
	}
	taken, reason, retry := k.lim.reserve(g.now(), est)
	if reason != "" {
		setRetryAfter(w.Header(), retry)
		msg := map[string]string{
			reasonConcurrency: fmt.Sprintf("The API key %q has %d requests in flight, its max_concurrency.", k.Name, k.MaxConcurrency),
			reasonRPM:         fmt.Sprintf("The API key %q reached its limit of %d requests per minute.", k.Name, k.RequestsPerMinute),
			reasonTPM:         fmt.Sprintf("The API key %q reached its limit of %d tokens per minute (this request reserves %d).", k.Name, k.TokensPerMinute, est),
		}[reason]
		writeError(w, http.StatusTooManyRequests, "rate_limit_error", "rate_limit_exceeded", "", msg+" Retry later.")
		g.auth.m.rejections.WithLabelValues(k.Name, reason).Inc()
		g.m.request(model, http.StatusTooManyRequests)
		return nil
	}
	ac.taken = taken
	k.admitted.Inc()
	return ac
}

// settle ends the reservation with the usage the answer reported: a 2xx
// answer without usage (a stream cut off, an engine that reports none)
// keeps its estimate; no answer, or any other answer, used nothing. A
// request that never reached a replica gives its request back too.
func (ac *account) settle() {
	known, used := ac.found, ac.usage.total()
	if !known && (ac.status < 200 || ac.status > 299) {
		// No answer, or not a 2xx: nothing was generated for the key.
		known, used = true, 0
	}
	ac.key.lim.settle(ac.g.now(), ac.taken, used, known, ac.sent)
	if ac.found {
		ac.key.promptTokens.Add(float64(ac.usage.PromptTokens))
		ac.key.completionTokens.Add(float64(ac.usage.CompletionTokens))
	}
}
