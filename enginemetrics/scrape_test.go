package enginemetrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/enginemetrics"
)

func TestScrape(t *testing.T) {
	t.Parallel()
	body := readFile(t, "llamacpp.txt")
	var accept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		accept = r.Header.Get("Accept")
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	s, err := enginemetrics.Scrape(t.Context(), srv.Client(), srv.URL+"/", names(t, engine.LlamaCpp), func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	if s.Running != k(2) || !s.At.Equal(t0) {
		t.Errorf("sample %+v", s)
	}
	if !strings.HasPrefix(accept, "text/plain;version=0.0.4") {
		t.Errorf("Accept %q", accept)
	}
}

func TestScrapeErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			// llama.cpp without --metrics (server.cpp:3577-3580).
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotImplemented)
			_, _ = w.Write([]byte(`{"error":{"code":501,"message":"This server does not support metrics endpoint. Start it with ` + "`--metrics`" + `","type":"not_supported_error"}}`))
		case "/big/metrics":
			w.Header().Set("Content-Type", "text/plain")
			line := []byte("# " + strings.Repeat("x", 1<<16) + "\n")
			for n := 0; n <= enginemetrics.MaxBody; n += len(line) {
				if _, err := w.Write(line); err != nil {
					return
				}
			}
		case "/garbage/metrics":
			_, _ = w.Write([]byte("<html>not metrics</html>\n"))
		case "/slow/metrics":
			<-r.Context().Done()
		}
	}))
	defer srv.Close()
	m := names(t, engine.LlamaCpp)
	ctx := t.Context()
	if _, err := enginemetrics.Scrape(ctx, srv.Client(), srv.URL, m, nil); err == nil || !strings.Contains(err.Error(), "501") || !strings.Contains(err.Error(), "--metrics") {
		t.Errorf("501: got %v", err)
	}
	if _, err := enginemetrics.Scrape(ctx, srv.Client(), srv.URL+"/big", m, nil); err == nil || !strings.Contains(err.Error(), "body over") {
		t.Errorf("big body: got %v", err)
	}
	if _, err := enginemetrics.Scrape(ctx, srv.Client(), srv.URL+"/garbage", m, nil); err == nil || !strings.Contains(err.Error(), "parse metrics") {
		t.Errorf("garbage: got %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := enginemetrics.Scrape(short, srv.Client(), srv.URL+"/slow", m, nil); err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Errorf("slow: got %v", err)
	}
	cmdNames, _ := engine.MetricsOf(engine.Command)
	if _, err := enginemetrics.Scrape(ctx, srv.Client(), srv.URL, cmdNames, nil); err == nil {
		t.Error("an engine without metrics scraped")
	}
}

func TestScrapeAny(t *testing.T) {
	t.Parallel()
	body := readFile(t, "tgi.txt")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	e, s, err := enginemetrics.ScrapeAny(t.Context(), srv.Client(), srv.URL, "/metrics", nil)
	if err != nil || e != engine.TGI || s.Waiting != k(4) {
		t.Errorf("got %q %+v %v", e, s, err)
	}
	if _, _, err := enginemetrics.ScrapeAny(t.Context(), srv.Client(), srv.URL, "/nope", nil); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("404: %v", err)
	}
}
