package fakeengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// maxBody bounds a request body.
const maxBody = 8 << 20

// Server is the HTTP side of a fake engine: the load gate, the OpenAI
// endpoints and the metrics. Its zero value is not usable; use NewServer.
type Server struct {
	cfg     Config
	stdout  io.Writer
	stderr  io.Writer
	created int64
	ready   atomic.Bool
	seq     atomic.Uint64
	m       *metrics
	mux     *http.ServeMux
	// lora is vLLM's and SGLang's adapters: loaded, and with requests in
	// flight; sglang SGLang's LoRA memory pool.
	lora   *loraSet
	sglang sglangPool
	// slots holds a token per running request when they are bounded
	// (Config.MaxRunning); nil otherwise.
	slots chan struct{}
	// sched is vLLM's scheduler and adapter caches with --enable-lora
	// (lorasched.go); nil otherwise.
	sched *loraSched
}

// NewServer returns a server for cfg that writes its access log to stdout
// and its load progress to stderr. Both writers must be safe for concurrent
// use, one Write per line. It is not ready until Load has run.
func NewServer(cfg Config, stdout, stderr io.Writer) *Server {
	s := &Server{cfg: cfg, stdout: stdout, stderr: stderr, created: time.Now().Unix()}
	s.m = newMetrics(cfg, s.ready.Load)
	s.lora = newLoraSet(cfg, s.m.reg)
	if cfg.Engine == EngineSGLang {
		// Run has checked the start (LoadAdapters).
		s.sglang, _ = sglangStart(cfg)
	}
	s.sched = newLoraSched(cfg, s.m.load, s.m.reg)
	if cfg.MaxRunning > 0 {
		s.slots = make(chan struct{}, cfg.MaxRunning)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /v1/models", s.gated(s.models))
	mux.HandleFunc("GET /lora-adapters", s.gated(s.loraAdapters))
	switch cfg.Engine {
	case EngineVLLM:
		mux.HandleFunc("POST /v1/load_lora_adapter", s.gated(s.loadLoRA))
		mux.HandleFunc("POST /v1/unload_lora_adapter", s.gated(s.unloadLoRA))
	case EngineSGLang:
		mux.HandleFunc("POST /load_lora_adapter", s.gated(s.loadSGLangLoRA))
		mux.HandleFunc("POST /unload_lora_adapter", s.gated(s.unloadSGLangLoRA))
	}
	mux.HandleFunc("POST /v1/chat/completions", s.gated(s.chatCompletions))
	mux.HandleFunc("POST /v1/completions", s.gated(s.completions))
	mux.HandleFunc("POST /v1/embeddings", s.gated(s.embeddings))
	mux.Handle("GET /metrics", s.m.handler())
	s.mux = mux
	return s
}

// Ready reports whether the model has loaded.
func (s *Server) Ready() bool { return s.ready.Load() }

// Handler serves every endpoint, with one access log line per request.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		s.mux.ServeHTTP(rec, r)
		code := rec.code()
		route := "other"
		if _, path, ok := strings.Cut(r.Pattern, " "); ok {
			route = path
		}
		s.m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		// uvicorn's access log, as vLLM writes it.
		fmt.Fprintf(s.stdout, "INFO:     %s - \"%s %s %s\" %d %s\n",
			r.RemoteAddr, r.Method, r.URL.RequestURI(), r.Proto, code, http.StatusText(code))
	})
}

// statusRecorder remembers the status a handler wrote. Flush and Unwrap let
// http.ResponseController reach the connection for streaming.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Flush() {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) code() int {
	if r.status == 0 {
		return http.StatusOK
	}
	return r.status
}

// Load plays the model load: progress lines on stderr about each second,
// in vLLM's words, until the configured load time has passed; then the
// server is ready. It returns early, not ready, when ctx ends.
func (s *Server) Load(ctx context.Context) {
	total, shards := s.cfg.LoadTime, s.cfg.LoadShards
	start := time.Now()
	fmt.Fprintf(s.stderr, "INFO fake-engine: loading model %s (%d shards, %s)\n", s.cfg.Model, shards, total)
	if total > 0 {
		fmt.Fprintln(s.stderr, progressLine(0, total, shards))
		done := time.NewTimer(total)
		defer done.Stop()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		// One tick a second: the loop ends on the timer, at most one
		// round after the last tick.
		maxRounds := int(total/time.Second) + 2
		finished := false
		for round := 0; round < maxRounds && !finished; round++ {
			select {
			case <-ctx.Done():
				return
			case <-done.C:
				finished = true
			case <-tick.C:
				if e := time.Since(start); e < total {
					fmt.Fprintln(s.stderr, progressLine(e, total, shards))
				}
			}
		}
		if !finished {
			select {
			case <-ctx.Done():
				return
			case <-done.C:
			}
		}
		fmt.Fprintln(s.stderr, progressLine(total, total, shards))
	}
	s.ready.Store(true)
	fmt.Fprintf(s.stderr, "INFO fake-engine: model loaded in %s; ready\n", time.Since(start).Round(time.Millisecond))
	fmt.Fprintln(s.stderr, "INFO:     Application startup complete.")
}

// progressLine is one line of vLLM's (tqdm's) checkpoint loading progress:
//
//	Loading safetensors checkpoint shards:  40% Completed | 2/5 [00:02<00:03,  1.00s/it]
func progressLine(elapsed, total time.Duration, shards int) string {
	if elapsed <= 0 {
		return fmt.Sprintf("Loading safetensors checkpoint shards:   0%% Completed | 0/%d [00:00<?, ?it/s]", shards)
	}
	elapsed = min(elapsed, total)
	done := int(int64(shards) * int64(elapsed) / int64(total))
	return fmt.Sprintf("Loading safetensors checkpoint shards: %3d%% Completed | %d/%d [%s<%s, %5.2fs/it]",
		done*100/shards, done, shards, clock(elapsed), clock(total-elapsed), total.Seconds()/float64(shards))
}

// clock formats a duration as tqdm does: mm:ss.
func clock(d time.Duration) string {
	sec := int64(d / time.Second)
	return fmt.Sprintf("%02d:%02d", sec/60, sec%60)
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if !s.ready.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "loading"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// gated answers 503 while the model loads, as llama.cpp's server does.
func (s *Server) gated(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			writeError(w, http.StatusServiceUnavailable, "Loading model")
			return
		}
		h(w, r)
	}
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	list := modelList{Object: "list"}
	for _, n := range s.cfg.names() {
		list.Data = append(list.Data, modelCard{
			ID: n, Object: "model", Created: s.created, OwnedBy: "fake-engine",
			Root: s.cfg.Model, MaxModelLen: s.cfg.MaxModelLen,
		})
	}
	// SGLang lists its registry with --enable-lora only
	// (http_server.py:1859-1869 at v0.5.18).
	if s.cfg.Engine == EngineVLLM || s.cfg.Engine == EngineSGLang && s.cfg.EnableLoRA {
		for _, a := range s.lora.list() {
			list.Data = append(list.Data, modelCard{
				ID: a.Name, Object: "model", Created: s.created, OwnedBy: "fake-engine",
				Root: a.Path, Parent: new(s.cfg.ModelID()),
			})
		}
	}
	writeJSON(w, http.StatusOK, list)
}

// decode reads a JSON request body into v, answering the error itself.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return false
	}
	return true
}

// checkModel answers 404 for a model this engine does not serve; an empty
// model means the served one.
func (s *Server) checkModel(w http.ResponseWriter, model string) bool {
	if model == "" || slices.Contains(s.cfg.names(), model) || s.adapterOf(model) != "" {
		return true
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", model))
	return false
}

// plan is one completion to generate.
type plan struct {
	id, object   string
	prompt       string
	promptTokens int
	tokens       []string
	finish       string
	stream       bool
	includeUsage bool
	// adapter is the vLLM adapter the request names; "" for the base.
	adapter string
	// prefix is the prompt's text before its last message and lead its
	// tokens: what the prefix cache may hold (lorasched.go).
	prefix string
	lead   int
}

// newPlan checks the lengths and picks the tokens. Without max_tokens the
// default length applies and the model "stops"; with it, the model runs to
// the limit.
func (s *Server) newPlan(w http.ResponseWriter, prompt string, promptTokens int, maxTokens *int) (plan, bool) {
	n, finish := s.cfg.MaxTokens, "stop"
	if maxTokens != nil {
		n, finish = *maxTokens, "length"
	}
	if n < 1 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("max_tokens must be at least 1, got %d.", n))
		return plan{}, false
	}
	if promptTokens+n > s.cfg.MaxModelLen {
		writeError(w, http.StatusBadRequest, fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			s.cfg.MaxModelLen, promptTokens+n, promptTokens, n))
		return plan{}, false
	}
	return plan{prompt: prompt, promptTokens: promptTokens, finish: finish, tokens: make([]string, n)}, true
}

// answering is the model name a response carries and its text is drawn
// from: the adapter's for a request naming one, as vLLM answers with the
// adapter's name (OpenAIServingModels.model_name,
// vllm/entrypoints/openai/models/serving.py:144-147 at 53e211d), so that
// every answer shows which adapter gave it; else the served model's.
func (s *Server) answering(p *plan) string {
	if p.adapter != "" {
		return p.adapter
	}
	return s.cfg.ModelID()
}

// pick draws the plan's tokens, once its adapter is known.
func (s *Server) pick(p *plan) {
	p.tokens = Tokens(s.answering(p), p.prompt, len(p.tokens))
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if !s.decode(w, r, &req) || !s.checkModel(w, req.Model) {
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "messages must not be empty")
		return
	}
	var msgs []ChatMessage
	for _, m := range req.Messages {
		t, err := messageText(m.Content)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		msgs = append(msgs, ChatMessage{Role: m.Role, Content: t})
	}
	prompt, promptTokens := ChatPrompt(msgs)
	prefix, lead := ChatPrompt(msgs[:len(msgs)-1])
	maxTokens := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		maxTokens = req.MaxCompletionTokens
	}
	p, ok := s.newPlan(w, prompt, promptTokens, maxTokens)
	if !ok {
		return
	}
	p.id, p.object = fmt.Sprintf("chatcmpl-fake-%d", s.seq.Add(1)), "chat.completion"
	p.adapter = s.adapterOf(req.Model)
	p.prefix, p.lead = prefix, lead
	s.pick(&p)
	p.stream, p.includeUsage = req.Stream, req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	s.generate(w, r, p)
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if !s.decode(w, r, &req) || !s.checkModel(w, req.Model) {
		return
	}
	in, err := parseInputs(req.Prompt)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if len(in) != 1 {
		writeError(w, http.StatusBadRequest, "fake-engine serves one prompt per request")
		return
	}
	p, ok := s.newPlan(w, in[0].text, in[0].tokens, req.MaxTokens)
	if !ok {
		return
	}
	p.id, p.object = fmt.Sprintf("cmpl-fake-%d", s.seq.Add(1)), "text_completion"
	p.adapter = s.adapterOf(req.Model)
	s.pick(&p)
	p.stream, p.includeUsage = req.Stream, req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	s.generate(w, r, p)
}

// generate writes a completion at the configured pace, whole or as
// server-sent events. It waits for a free slot first (with --max-num-seqs
// and its spellings), counted as waiting; while it generates it is
// running and holds its prompt and the tokens so far in the KV cache.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, p plan) {
	arrived := time.Now()
	s.m.inFlight.Inc()
	defer s.m.inFlight.Dec()
	s.m.promptTokens.Add(float64(p.promptTokens))
	ctx := r.Context()
	e := s.m.engine
	if e.requested != nil {
		e.requested()
	}
	s.lora.request(p.adapter, 1, 0)
	release, ok := s.admitFor(ctx, p.adapter)
	if !ok {
		s.lora.request(p.adapter, -1, 0)
		return
	}
	s.lora.request(p.adapter, -1, 1)
	defer s.lora.request(p.adapter, 0, -1)
	defer release()
	if e.prompt != nil {
		e.prompt(p.promptTokens, p.stream)
	}
	l := s.m.load
	held := int64(p.promptTokens)
	l.held.Add(held)
	l.reserved.Add(int64(p.promptTokens + len(p.tokens)))
	defer func() {
		l.held.Add(-held)
		l.reserved.Add(-int64(p.promptTokens + len(p.tokens)))
	}()
	start := time.Now()
	next := s.pacer(ctx, start, p)
	// produce waits for token i (from 1) and counts it.
	produce := func(i int) bool {
		if next(i) != nil {
			return false
		}
		s.m.genTokens.Inc()
		l.held.Add(1)
		held++
		if e.token != nil {
			e.token(p.stream)
		}
		if i == 1 && e.firstTok != nil {
			e.firstTok(time.Since(arrived), p.stream)
		}
		return true
	}
	model := s.answering(&p)
	u := usage{PromptTokens: p.promptTokens, CompletionTokens: len(p.tokens), TotalTokens: p.promptTokens + len(p.tokens)}
	chat := p.object == "chat.completion"
	created := start.Unix()

	if !p.stream {
		for i := range p.tokens {
			if !produce(i + 1) {
				return
			}
		}
		if e.finished != nil {
			e.finished(len(p.tokens))
		}
		text := strings.Join(p.tokens, "")
		finish := p.finish
		if chat {
			writeJSON(w, http.StatusOK, chatResponse{
				ID: p.id, Object: p.object, Created: created, Model: model, Usage: &u,
				Choices: []chatChoice{{Message: &message{Role: "assistant", Content: text}, FinishReason: &finish}},
			})
			return
		}
		writeJSON(w, http.StatusOK, completionResponse{
			ID: p.id, Object: p.object, Created: created, Model: model, Usage: &u,
			Choices: []completionChoice{{Text: text, FinishReason: &finish}},
		})
		return
	}

	sse := newSSE(w)
	chunk := func(text *string, role string, finish *string) any {
		if chat {
			return chatResponse{
				ID: p.id, Object: "chat.completion.chunk", Created: created, Model: model,
				Choices: []chatChoice{{Delta: &delta{Role: role, Content: text}, FinishReason: finish}},
			}
		}
		t := ""
		if text != nil {
			t = *text
		}
		return completionResponse{
			ID: p.id, Object: p.object, Created: created, Model: model,
			Choices: []completionChoice{{Text: t, FinishReason: finish}},
		}
	}
	if chat {
		empty := ""
		if sse.event(chunk(&empty, "assistant", nil)) != nil {
			return
		}
	}
	for i, tok := range p.tokens {
		if !produce(i + 1) {
			return
		}
		if sse.event(chunk(&tok, "", nil)) != nil {
			return
		}
	}
	if e.finished != nil {
		e.finished(len(p.tokens))
	}
	finish := p.finish
	var final any
	if chat {
		final = chunk(nil, "", &finish)
	} else {
		empty := ""
		final = chunk(&empty, "", &finish)
	}
	if sse.event(final) != nil {
		return
	}
	if p.includeUsage {
		var last any
		if chat {
			last = chatResponse{ID: p.id, Object: "chat.completion.chunk", Created: created, Model: model, Choices: []chatChoice{}, Usage: &u}
		} else {
			last = completionResponse{ID: p.id, Object: p.object, Created: created, Model: model, Choices: []completionChoice{}, Usage: &u}
		}
		if sse.event(last) != nil {
			return
		}
	}
	_ = sse.done()
}

// admit waits for a free slot when the running requests are bounded,
// counted as waiting meanwhile, and then counts the request as running
// until release. ok is false when ctx ended first.
func (s *Server) admit(ctx context.Context) (release func(), ok bool) {
	l := s.m.load
	if s.slots != nil {
		l.waiting.Add(1)
		select {
		case s.slots <- struct{}{}:
			l.waiting.Add(-1)
		case <-ctx.Done():
			l.waiting.Add(-1)
			return nil, false
		}
	}
	l.running.Add(1)
	return func() {
		l.running.Add(-1)
		if s.slots != nil {
			<-s.slots
		}
	}, true
}

// admitFor is admit, or with --enable-lora (vLLM) its scheduler's: for a
// request of adapter ("" for the base model).
func (s *Server) admitFor(ctx context.Context, adapter string) (release func(), ok bool) {
	if s.sched != nil {
		return s.sched.admit(ctx, adapter)
	}
	return s.admit(ctx)
}

// pacer returns what waits for a completion's n-th token (from 1), which
// started at start: n/rate after start; or with --enable-lora (vLLM), the
// first when its adapter load and prefill end (lorasched.go), each next
// 1/rate after the one before and after the GPU work under way then.
func (s *Server) pacer(ctx context.Context, start time.Time, p plan) func(n int) error {
	if s.sched == nil {
		return func(n int) error { return s.wait(ctx, start, n) }
	}
	var step time.Duration
	if s.cfg.TokensPerSecond > 0 {
		step = time.Duration(float64(time.Second) / s.cfg.TokensPerSecond)
	}
	last := s.sched.prefill(start, p.adapter, p.prefix, p.lead, p.promptTokens)
	return func(n int) error {
		if n == 1 {
			return sleepUntil(ctx, last)
		}
		due := last.Add(step)
		if err := sleepUntil(ctx, due); err != nil {
			return err
		}
		// The work under way when it is due, known only then.
		if b := s.sched.busyUntil(due); b.After(due) {
			due = b
			if err := sleepUntil(ctx, due); err != nil {
				return err
			}
		}
		last = due
		return nil
	}
}

// wait blocks until the n-th token is due, n/rate after start, or ctx ends.
func (s *Server) wait(ctx context.Context, start time.Time, n int) error {
	if s.cfg.TokensPerSecond <= 0 || n <= 0 {
		return ctx.Err()
	}
	due := start.Add(time.Duration(float64(n) / s.cfg.TokensPerSecond * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	var req embeddingRequest
	if !s.decode(w, r, &req) || !s.checkModel(w, req.Model) {
		return
	}
	in, err := parseInputs(req.Input)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	dim := s.cfg.EmbeddingDim
	if req.Dimensions != nil {
		dim = *req.Dimensions
	}
	if dim < 1 || dim > 1<<16 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("dimensions must be from 1 to %d, got %d", 1<<16, dim))
		return
	}
	if req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("encoding_format must be float or base64, got %q", req.EncodingFormat))
		return
	}
	s.m.inFlight.Inc()
	defer s.m.inFlight.Dec()
	release, ok := s.admitFor(r.Context(), "")
	if !ok {
		return
	}
	defer release()
	resp := embeddingResponse{Object: "list", Model: s.cfg.ModelID()}
	for i, x := range in {
		v := Embedding(s.cfg.ModelID(), x.text, dim)
		var e any = v
		if req.EncodingFormat == "base64" {
			e = base64Floats(v)
		}
		resp.Data = append(resp.Data, embedding{Object: "embedding", Index: i, Embedding: e})
		resp.Usage.PromptTokens += x.tokens
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	s.m.promptTokens.Add(float64(resp.Usage.PromptTokens))
	writeJSON(w, http.StatusOK, resp)
}

// sseWriter frames server-sent events as OpenAI streams them.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// event writes `data: <json>` and a blank line, and flushes.
func (e *sseWriter) event(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return e.write("data: " + string(b) + "\n\n")
}

// done writes OpenAI's end of stream.
func (e *sseWriter) done() error { return e.write("data: [DONE]\n\n") }

func (e *sseWriter) write(s string) error {
	if _, err := io.WriteString(e.w, s); err != nil {
		return fmt.Errorf("write event: %w", err)
	}
	if err := e.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("flush event: %w", err)
	}
	return nil
}

// writeJSON answers v as JSON, '<', '>' and '&' as they are (as the
// engines' servers write them: Starlette's JSONResponse does not escape
// them).
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// errorTypes are the error types vLLM's OpenAI server names.
var errorTypes = map[int]string{
	http.StatusBadRequest:         "BadRequestError",
	http.StatusNotFound:           "NotFoundError",
	http.StatusServiceUnavailable: "ServiceUnavailableError",
}

func writeError(w http.ResponseWriter, code int, msg string) {
	t, ok := errorTypes[code]
	if !ok {
		t = "InternalServerError"
	}
	writeJSON(w, code, errorResponse{Error: apiError{Message: msg, Type: t, Code: code}})
}
