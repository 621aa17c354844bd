package gatewayclient_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/gatewayclient"
	"github.com/llmgw/llmgw/internal/testing/consulfake"
	"github.com/llmgw/llmgw/internal/testing/nomadfake"
)

func TestDemandClientErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/html" + gatewayapi.DemandPath:
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html>")
		case "/other" + gatewayapi.DemandPath:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"models":null}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	for _, tt := range []struct{ base, want string }{
		{srv.URL, "404 Not Found"},
		{srv.URL + "/html", `Content-Type "text/html"`},
		{srv.URL + "/other", "not a demand answer"},
		{"http://127.0.0.1:1", "connection refused"},
	} {
		_, err := gatewayclient.DemandClient{}.Read(t.Context(), tt.base)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("%s: %v, want an error naming the URL and %q", tt.base, err, tt.want)
		}
	}
}

// The gateways are found as llmgw-gateway services: in Nomad, the
// registrations of jobs/llmgw-gateway.nomad.hcl's service in the namespace
// asked; in Consul, those of the gateway's ConsulRegistration whose check
// passes. A registration tagged gatewayapi.TLSTag is https://.
func TestFindGateways(t *testing.T) {
	n := nomadfake.New()
	defer n.Close()
	gw := []string{gatewayapi.GatewayServiceName}
	for _, port := range []int{8081, 8080} {
		n.AddService(nomadfake.ServiceSpec{Name: gatewayapi.GatewayServiceName, Address: "10.0.0.1", Port: port, Tags: gw})
	}
	n.AddService(nomadfake.ServiceSpec{Name: gatewayapi.GatewayServiceName, Address: "10.0.0.9", Port: 8443, Tags: []string{gatewayapi.GatewayServiceName, gatewayapi.TLSTag}})
	n.AddService(nomadfake.ServiceSpec{Name: gatewayapi.GatewayServiceName, Namespace: "other", Address: "10.0.0.8", Port: 8080, Tags: gw})
	n.AddService(nomadfake.ServiceSpec{Name: "m-0", Address: "10.0.0.7", Port: 9000, Tags: []string{gatewayapi.ServiceTag, gatewayapi.TagModel + "m"}}) // a replica: not a gateway
	got, err := gatewayclient.NomadGateways(t.Context(), n.Client(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"http://10.0.0.1:8080", "http://10.0.0.1:8081", "https://10.0.0.9:8443"}, got); diff != "" {
		t.Errorf("Nomad gateways (-want +got):\n%s", diff)
	}
	got, err = gatewayclient.NomadGateways(t.Context(), n.Client(t), "other")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"http://10.0.0.8:8080"}, got); diff != "" {
		t.Errorf("Nomad gateways in namespace other (-want +got):\n%s", diff)
	}

	c := consulfake.New()
	defer c.Close()
	c.Register(consulfake.Service{ID: "gw-a", Name: gatewayapi.GatewayServiceName, Address: "10.0.0.2", Port: 8080})
	c.Register(consulfake.Service{ID: "gw-b", Name: gatewayapi.GatewayServiceName, Port: 8080, NodeAddress: "10.0.0.3"})
	c.Register(consulfake.Service{ID: "gw-c", Name: gatewayapi.GatewayServiceName, Address: "10.0.0.4", Port: 8080, Status: "critical"})
	c.Register(consulfake.Service{ID: "gw-d", Name: gatewayapi.GatewayServiceName, Address: "10.0.0.5", Port: 8443, Tags: []string{gatewayapi.GatewayServiceName, gatewayapi.TLSTag}})
	got, err = gatewayclient.ConsulGateways(t.Context(), c.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"http://10.0.0.2:8080", "http://10.0.0.3:8080", "https://10.0.0.5:8443"}, got); diff != "" {
		t.Errorf("Consul gateways (-want +got):\n%s", diff)
	}
}
