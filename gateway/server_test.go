package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/gateway/config"
	"github.com/llmgw/llmgw/internal/testing/consulfake"
	"github.com/llmgw/llmgw/internal/testing/syncbuf"
	"github.com/llmgw/llmgw/internal/testing/testcert"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// serverSettings are settings Open takes: `llmgw gateway`'s defaults, on a
// loopback port of the system's choice, discovering from a Nomad that
// does not answer and reading no model list.
func serverSettings() config.Settings {
	return config.Settings{
		Listen: "127.0.0.1:0", Nomad: "http://127.0.0.1:1", Register: true,
		RegisterCheckInterval: DefaultRegisterCheckInterval, ConsulWait: DefaultConsulWait,
		MaxBodyChatCompletions: DefaultMaxBody, MaxBodyCompletions: DefaultMaxBody, MaxBodyEmbeddings: DefaultMaxBody,
		BodyMemory: DefaultBodyMemory, MaxJSONDepth: DefaultMaxJSONDepth, BodyReadTimeout: DefaultBodyReadTimeout,
		Attempts: DefaultAttempts, BreakerFailures: DefaultBreakerFailures, CheckParallelism: DefaultCheckParallelism,
		NoReplicaRetryAfter: DefaultNoReplicaRetryAfter, BreakerOpen: DefaultBreakerOpen, BreakerMaxOpen: DefaultBreakerMaxOpen,
		DialTimeout: DefaultDialTimeout, HeaderTimeout: DefaultHeaderTimeout,
		CheckInterval: DefaultCheckInterval, CheckTimeout: DefaultCheckTimeout,
		HoldTimeout: DefaultHoldTimeout, DemandWindow: DefaultDemandWindow,
		HoldPerModel: DefaultHoldPerModel, HoldTotal: DefaultHoldTotal, WakeBurst: DefaultWakeBurst,
		PrefixLoadFactor: DefaultPrefixLoadFactor, PrefixHistoryLoadFactor: DefaultPrefixHistoryLoadFactor,
		PrefixOpeningWait: DefaultPrefixOpeningWait,
	}
}

// runServer runs srv until the test ends, and returns what Run returns.
func runServer(t *testing.T, srv *Server) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- srv.Run(t.Context()) }()
	t.Cleanup(func() { _ = srv.Close() })
	return done
}

// The Server discovering from Consul: served on Addr, registered while it
// runs; Close stops Run (which returns nil), deregisters, and lets go of
// the listener; a Server runs once.
func TestServer(t *testing.T) {
	c := consulfake.New()
	t.Cleanup(c.Close)
	set := serverSettings()
	set.Nomad, set.Consul, set.RegisterTags = "", c.Addr(), []string{"edge"}
	var logs syncbuf.Buffer
	srv, err := Open(set, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	done := runServer(t, srv)
	addr := srv.Addr().String()
	reg, err := config.NewRegistration("", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the server registered in consul", func() bool {
		svc, ok := c.Service(reg.ID)
		return ok && len(svc.Tags) == 2 && svc.Tags[1] == "edge"
	})
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	wait.Until(t, "/healthz 200", func() bool { code, _ := get("/healthz"); return code == http.StatusOK })
	if _, metrics := get("/metrics"); !strings.Contains(metrics, "go_goroutines") || !strings.Contains(metrics, "llmgw_gateway_requests_in_flight") {
		t.Errorf("/metrics on the API's listener lacks the process's or the gateway's metrics:\n%s", metrics)
	}
	if want := `"discovery":"consul ` + c.Addr() + `"`; !strings.Contains(logs.String(), want) {
		t.Errorf("the start's log line lacks %s:\n%s", want, logs.String())
	}

	if err := srv.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after Close: %v, want nil", err)
		}
	case <-time.After(wait.Timeout):
		t.Fatal("Run did not return after Close")
	}
	if _, ok := c.Service(reg.ID); ok {
		t.Error("still registered after Close")
	}
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after Close", addr)
	}
	if err := srv.Run(t.Context()); !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Run after Close: %v, want http.ErrServerClosed", err)
	}
	if err := srv.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// Run ends when its context does, with nil.
func TestServerRunUntilContextEnds(t *testing.T) {
	srv, err := Open(serverSettings(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	wait.Until(t, "serving", func() bool {
		resp, err := http.Get("http://" + srv.Addr().String() + "/metrics")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(wait.Timeout):
		t.Fatal("Run did not return after its context ended")
	}
}

// Reload reads the key file and the TLS certificate again, unchanged as
// they are (which their looks every few seconds would not read again).
func TestServerReload(t *testing.T) {
	dir := t.TempDir()
	cf, kf, keys := filepath.Join(dir, "gw.crt"), filepath.Join(dir, "gw.key"), filepath.Join(dir, "keys.hcl")
	testcert.Write(t, cf, kf, 7, time.Now().Add(-time.Hour))
	if err := os.WriteFile(keys, []byte("key \"a\" {\n  hash = \""+HashKey("sk-a")+"\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set := serverSettings()
	set.TLSCertFile, set.TLSKeyFile, set.KeysFile = cf, kf, keys
	srv, err := Open(set, nil)
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, srv)
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // a self-signed test certificate
	defer tr.CloseIdleConnections()
	metrics := func() string {
		resp, err := (&http.Client{Transport: tr}).Get("https://" + srv.Addr().String() + "/metrics")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	wait.Until(t, "the key file read once", func() bool {
		return strings.Contains(metrics(), `llmgw_gateway_key_reloads_total{outcome="ok"} 1`)
	})
	if m := metrics(); strings.Contains(m, `llmgw_gateway_tls_reloads_total{outcome="ok"}`) {
		t.Fatalf("the certificate reloaded before Reload:\n%s", m)
	}
	srv.Reload()
	wait.Until(t, "the key file and the certificate read again", func() bool {
		m := metrics()
		return strings.Contains(m, `llmgw_gateway_key_reloads_total{outcome="ok"} 2`) &&
			strings.Contains(m, `llmgw_gateway_tls_reloads_total{outcome="ok"} 1`)
	})
	if got := servedSerial(t, srv.Addr().String()); got != 7 {
		t.Errorf("serial %d, want 7", got)
	}
}

// Open refuses settings Check refuses, naming the setting by its
// attribute; what only serving finds is a *config.SettingError naming the
// setting; a bad key file is named by file:line.
func TestOpenErrors(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	badKeys := filepath.Join(dir, "keys.hcl")
	if err := os.WriteFile(badKeys, []byte("key \"a\" {\n  hash = \"nope\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	notCert := filepath.Join(dir, "gw.crt")
	if err := os.WriteFile(notCert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name        string
		change      func(*config.Settings)
		wantSetting string // of a *config.SettingError, "" for none
		want        string
	}{
		{"checked", func(s *config.Settings) { s.MaxJSONDepth = 0 }, "", "max_json_depth: 0: want 1 to 10000"},
		{"keys from a variable with consul", func(s *config.Settings) { s.Nomad, s.Consul, s.KeysVariable = "", "127.0.0.1:1", "llmgw/keys" },
			"", "keys_variable: with consul, models_nomad names the Nomad to read the keys from"},
		{"listen taken", func(s *config.Settings) { s.Listen = taken.Addr().String() }, "listen", "listen: " + taken.Addr().String() + ": "},
		{"certificate", func(s *config.Settings) { s.TLSCertFile, s.TLSKeyFile = notCert, notCert }, "tls_cert_file", "tls_cert_file: certificate " + notCert},
		{"key file missing", func(s *config.Settings) { s.KeysFile = filepath.Join(dir, "none.hcl") }, "keys_file", "keys_file: "},
		{"key file", func(s *config.Settings) { s.KeysFile = badKeys }, "", badKeys + ":2: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			set := serverSettings()
			tt.change(&set)
			srv, err := Open(set, nil)
			if err == nil {
				srv.Close()
				t.Fatal("no error")
			}
			var se *config.SettingError
			if got := errors.As(err, &se); got != (tt.wantSetting != "") || got && se.Setting != tt.wantSetting {
				t.Errorf("%v: setting error %v %+v, want one for %q", err, got, se, tt.wantSetting)
			}
			if !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("got %q, want it to start %q", err, tt.want)
			}
		})
	}
}

// shareLimits follows the count of gateways, and keeps the last share when
// the count fails.
func TestShareLimits(t *testing.T) {
	ks, err := ParseKeys("k.hcl", []byte("key \"a\" {\n  hash = \""+HashKey("sk")+"\"\n  max_concurrency = 8\n}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	g := New(Options{Keys: StaticKeys{Set: ks}, Registerer: reg})
	g.UpdateKeys(ks, nil)
	counts := make(chan func() ([]string, error))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		shareLimits(ctx, g, func(context.Context) ([]string, error) { return (<-counts)() }, time.Millisecond, slog.New(slog.DiscardHandler))
	}()
	share := func() float64 { return testutil.ToFloat64(gaugeOf(t, reg, "llmgw_gateway_key_limit_share")) }
	counts <- func() ([]string, error) { return []string{"a", "b", "c", "d"}, nil }
	counts <- func() ([]string, error) { return nil, context.DeadlineExceeded }
	if got := share(); got != 0.25 {
		t.Errorf("share with 4 gateways: %v", got)
	}
	// Each send is taken once the call before it has returned.
	counts <- func() ([]string, error) { return nil, context.DeadlineExceeded }
	if got := share(); got != 0.25 {
		t.Errorf("share after a failed count: %v, want the last, 0.25", got)
	}
	counts <- func() ([]string, error) { return nil, nil }
	counts <- func() ([]string, error) { return nil, context.DeadlineExceeded }
	if got := share(); got != 1 {
		t.Errorf("share with none listed: %v, want 1", got)
	}
	cancel()
	select {
	case counts <- func() ([]string, error) { return nil, nil }:
	case <-done:
	}
	<-done
}

func gaugeOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name})
			g.Set(mf.GetMetric()[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("no %s", name)
	return nil
}

func TestLoopback(t *testing.T) {
	for _, tt := range []struct {
		addr string
		want bool
	}{{"127.0.0.1:8080", true}, {"[::1]:8080", true}, {"0.0.0.0:8080", false}, {"[::]:8080", false}, {"10.0.0.5:8080", false}} {
		a, err := net.ResolveTCPAddr("tcp", tt.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := loopback(a); got != tt.want {
			t.Errorf("loopback(%s) = %v", tt.addr, got)
		}
	}
}
