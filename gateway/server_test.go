package gateway

import (
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

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
