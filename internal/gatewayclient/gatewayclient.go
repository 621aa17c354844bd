package gatewayclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/gatewayapi"
)

// DemandClient reads gateways' demand: the reading side of
// gatewayapi.DemandPath (the controller's autoscaler, llmgw ctl cache).
type DemandClient struct {
	// HTTP sends the requests; a client with a 5 s timeout when nil.
	HTTP *http.Client
}

// maxDemandBody bounds a demand answer read.
const maxDemandBody = 8 << 20

var defaultDemandHTTP = &http.Client{Timeout: 5 * time.Second}

// Read returns the demand of the gateway at base ("http://host:port").
// Any answer but a 200 with a JSON Demand is an error naming the URL.
func (c DemandClient) Read(ctx context.Context, base string) (gatewayapi.Demand, error) {
	hc := c.HTTP
	if hc == nil {
		hc = defaultDemandHTTP
	}
	u := strings.TrimSuffix(base, "/") + gatewayapi.DemandPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return gatewayapi.Demand{}, fmt.Errorf("demand %s: %w", u, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return gatewayapi.Demand{}, fmt.Errorf("demand: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDemandBody+1))
	if err != nil {
		return gatewayapi.Demand{}, fmt.Errorf("demand %s: reading the answer: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return gatewayapi.Demand{}, fmt.Errorf("demand %s: %s: %.200s", u, resp.Status, body)
	}
	if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "application/json" {
		return gatewayapi.Demand{}, fmt.Errorf("demand %s: Content-Type %q, want application/json", u, resp.Header.Get("Content-Type"))
	}
	if len(body) > maxDemandBody {
		return gatewayapi.Demand{}, fmt.Errorf("demand %s: answer over %d bytes", u, maxDemandBody)
	}
	var d gatewayapi.Demand
	if err := json.Unmarshal(body, &d); err != nil {
		return gatewayapi.Demand{}, fmt.Errorf("demand %s: %w", u, err)
	}
	if d.SampledAt.IsZero() || d.Models == nil {
		return gatewayapi.Demand{}, fmt.Errorf("demand %s: not a demand answer (no sampled_at or models)", u)
	}
	return d, nil
}

// gatewayURL is a gateway registration's base URL.
func gatewayURL(host string, port int, tags []string) string {
	scheme := "http://"
	if slices.Contains(tags, gatewayapi.TLSTag) {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(host, strconv.Itoa(port))
}

// NomadGateways returns the base URLs ("http://host:port", "https://" for a
// registration tagged gatewayapi.TLSTag) of the gateways registered in
// Nomad as gatewayapi.GatewayServiceName in namespace ns ("" is
// "default"), sorted: the gateways that run as Nomad jobs with
// jobs/llmgw-gateway.nomad.hcl's service block. Nomad keeps no health on a
// registration, so a gateway listed may not answer: its demand is then
// missing, never zero.
func NomadGateways(ctx context.Context, c *nomadapi.Client, ns string) ([]string, error) {
	if ns == "" {
		ns = nomadapi.DefaultNamespace
	}
	regs, _, err := c.Services().Get(gatewayapi.GatewayServiceName, (&nomadapi.QueryOptions{Namespace: ns}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("nomad service %s: %w", gatewayapi.GatewayServiceName, err)
	}
	var out []string
	for _, r := range regs {
		if r.Address != "" && r.Port > 0 {
			out = append(out, gatewayURL(r.Address, r.Port, r.Tags))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// ConsulGateways returns the base URLs of the gateways registered in
// Consul as gatewayapi.GatewayServiceName whose checks pass (the gateway's
// ConsulRegistration), sorted.
func ConsulGateways(ctx context.Context, c *consulapi.Client) ([]string, error) {
	entries, _, err := c.Health().Service(gatewayapi.GatewayServiceName, "", true, (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("consul service %s: %w", gatewayapi.GatewayServiceName, err)
	}
	var out []string
	for _, e := range entries {
		if e == nil || e.Service == nil || e.Service.Port <= 0 {
			continue
		}
		host := e.Service.Address
		if host == "" && e.Node != nil {
			host = e.Node.Address
		}
		if host != "" {
			out = append(out, gatewayURL(host, e.Service.Port, e.Service.Tags))
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
