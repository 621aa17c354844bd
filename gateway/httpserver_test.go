package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmgw/llmgw/internal/testing/syncbuf"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// NewServer's server sends what net/http has to say (here a handler's
// panic) to the logger, at warn, and answers a request whose headers pass
// ServerMaxHeaderBytes with 431.
func TestNewServer(t *testing.T) {
	var out syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	mux := http.NewServeMux()
	mux.HandleFunc("/panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := httptest.NewUnstartedServer(mux)
	srv.Config = NewServer(mux, log)
	srv.Start()
	defer srv.Close()
	if srv.Config.ReadHeaderTimeout != ServerReadHeaderTimeout || srv.Config.IdleTimeout != ServerIdleTimeout || srv.Config.MaxHeaderBytes != ServerMaxHeaderBytes {
		t.Errorf("settings: %+v", srv.Config)
	}

	if resp, err := http.Get(srv.URL + "/panic"); err == nil {
		resp.Body.Close()
		t.Errorf("a handler's panic answered %d; want the connection closed", resp.StatusCode)
	}
	wait.Until(t, "the panic logged", func() bool {
		s := out.String()
		return strings.Contains(s, `"level":"WARN"`) && strings.Contains(s, "panic serving") && strings.Contains(s, "boom")
	})

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Big", strings.Repeat("a", ServerMaxHeaderBytes+8<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("headers over %d bytes: %d; want 431", ServerMaxHeaderBytes, resp.StatusCode)
	}
}

// NewFastServer's server, as NewServer's: a handler's panic is logged at
// warn and its connection closed without an answer, headers past
// ServerMaxHeaderBytes are answered 431, and a handler that writes past
// its Content-Length is told so.
func TestNewFastServer(t *testing.T) {
	var out syncbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	mux := http.NewServeMux()
	mux.HandleFunc("/panic", func(http.ResponseWriter, *http.Request) { panic("boom") })
	late := make(chan error, 1)
	mux.HandleFunc("/late", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "2")
		_, _ = w.Write([]byte("ok"))
		_ = http.NewResponseController(w).Flush()
		_, err := w.Write([]byte("more"))
		late <- err
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := serveGatewayLogged(t, mux, nil, log)

	if resp, err := http.Get(srv.URL + "/panic"); err == nil {
		resp.Body.Close()
		t.Errorf("a handler's panic answered %d; want the connection closed", resp.StatusCode)
	}
	wait.Until(t, "the panic logged", func() bool {
		s := out.String()
		return strings.Contains(s, `"level":"WARN"`) && strings.Contains(s, "panic serving") && strings.Contains(s, "boom")
	})

	resp, err := http.Get(srv.URL + "/late")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Errorf("/late answered %q; want ok", b)
	}
	if err := <-late; err == nil {
		t.Error("a write past the Content-Length succeeded; want an error")
	}

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Big", strings.Repeat("a", ServerMaxHeaderBytes+8<<10))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("headers over %d bytes: %d; want 431", ServerMaxHeaderBytes, resp.StatusCode)
	}
}
