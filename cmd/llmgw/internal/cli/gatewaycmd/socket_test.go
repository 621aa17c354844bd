package gatewaycmd

import (
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// In a Nomad task with identity { env = true }, Nomad sets NOMAD_UNIX_ADDR
// (the task API socket) and NOMAD_TOKEN: without --nomad the gateway
// discovers through the socket, with that token, and NOMAD_ADDR (here a
// dead address, as a client agent's own environment may pass through)
// is not used.
func TestGatewayNomadFromTaskSocket(t *testing.T) {
	const model = "qwen-7b"
	nf := nomadfake.New()
	t.Cleanup(nf.Close)
	items, err := gatewayapi.ModelList{Models: []gatewayapi.ListedModel{{Name: model}}}.Items()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := nf.Client(t).Variables().Update(&nomadapi.Variable{Path: gatewayapi.ModelsVariable, Items: items}, nil); err != nil {
		t.Fatal(err)
	}

	// The task API: a unix socket in front of the fake Nomad, counting
	// the requests and the token each carried.
	target, err := url.Parse(nf.URL())
	if err != nil {
		t.Fatal(err)
	}
	var calls, withToken atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("X-Nomad-Token") == "wi-token" {
			withToken.Add(1)
		}
		proxy.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := "http://" + dead.Addr().String()
	_ = dead.Close()
	t.Setenv("NOMAD_UNIX_ADDR", "unix://"+sock)
	t.Setenv("NOMAD_TOKEN", "wi-token")
	t.Setenv("NOMAD_ADDR", deadAddr)
	t.Setenv("NOMAD_NAMESPACE", "")

	addr, stderr, _ := startGateway(t, []string{"--listen", "127.0.0.1:0", "--check-interval", "200ms"})
	wait.Until(t, "the model list read through the socket", func() bool {
		resp, err := http.Get("http://" + addr + "/v1/models")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return strings.Contains(b.String(), `"id":"`+model+`"`)
	})
	if c, w := calls.Load(), withToken.Load(); c == 0 || c != w {
		t.Errorf("%d requests through the socket, %d with the workload token: want some, all with it", c, w)
	}
	if want := `"discovery":"nomad unix://` + sock + `"`; !strings.Contains(stderr.String(), want) {
		t.Errorf("the gateway's log does not say it discovers through the socket (%s):\n%s", want, stderr.String())
	}
	if strings.Contains(stderr.String(), deadAddr) {
		t.Errorf("the gateway used NOMAD_ADDR %s beside NOMAD_UNIX_ADDR:\n%s", deadAddr, stderr.String())
	}
}
