package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Choose says what a request would do without doing it: at idle the
// replica a real request then goes to, with its route; from a load given,
// the same for two gateways that list the replicas in other orders under
// other IDs, spills included; and nothing is counted.
func TestChoose(t *testing.T) {
	g1, g2, one, _ := twoPrefixGateways(t, 3)
	addrOf := map[string]string{}
	for _, in := range one {
		addrOf[in.ID] = in.Address
	}
	body := func(tenant, user, turn int) []byte {
		b, err := json.Marshal(map[string]any{"model": "m", "messages": conversation(strings.Repeat(fmt.Sprintf("Tenant %d. ", tenant), 40), fmt.Sprintf("user%d", user), turn), "max_tokens": 4})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// Idle: the choice is where the request goes.
	for tenant := range 4 {
		b := body(tenant, 0, 1)
		addr, route := g1.Choose("m", "/v1/chat/completions", b, nil)
		a := g1.post(t, "/v1/chat/completions", string(b))
		if a.status != 200 || addrOf[a.header.Get(ReplicaHeader)] != addr || a.header.Get(RouteHeader) != route || route != RoutePrefix {
			t.Errorf("tenant %d: chose %s (%s), the request went to %s (%s)", tenant, addr, route, addrOf[a.header.Get(ReplicaHeader)], a.header.Get(RouteHeader))
		}
	}

	// From the same loads, the two gateways agree, spills and all.
	spills := 0
	for i := range 200 {
		load := map[string]int64{}
		for j, in := range one {
			// One replica in turn busy, the others nearly idle.
			if (i+j)%3 == 0 {
				load[in.Address] = int64(4 + i%4)
			} else {
				load[in.Address] = int64((i / 3) % 2)
			}
		}
		b := body(i%5, i%3, 1+i%4)
		a1, r1 := g1.Choose("m", "/v1/chat/completions", b, load)
		a2, r2 := g2.Choose("m", "/v1/chat/completions", b, load)
		if a1 == "" || a1 != a2 || r1 != r2 {
			t.Fatalf("request %d, load %v: gateway 1 chose %s (%s), gateway 2 %s (%s)", i, load, a1, r1, a2, r2)
		}
		if r1 == RouteSpill {
			spills++
		}
	}
	t.Logf("200 requests from 200 loads: %d spills, the same for both gateways", spills)
	if spills == 0 {
		t.Errorf("no load of 200 made a spill: the loads tested nothing but the order")
	}
	// The unkeyable: least-outstanding, from the load given.
	load := map[string]int64{one[0].Address: 3, one[1].Address: 0, one[2].Address: 5}
	if addr, route := g1.Choose("m", "/v1/chat/completions", []byte(`{"model":"m","messages":"x"}`), load); addr != one[1].Address || route != RouteLeastOutstanding {
		t.Errorf("unkeyable body: %s (%s), want %s (least-outstanding)", addr, route, one[1].Address)
	}
	if addr, _ := g1.Choose("nope", "/v1/chat/completions", body(0, 0, 1), nil); addr != "" {
		t.Errorf("a model with no replica: chose %q", addr)
	}
	// A first turn at its replica's opening limit is not held: the
	// answer is the replica it would wait for, and no wait is counted.
	g3 := startGateway(t, Options{Routing: map[string]string{"m": RoutePrefix}, PrefixOpeningLimit: 1}, one...)
	busy := map[string]int64{}
	for _, in := range one {
		busy[in.Address] = 5
	}
	for tenant := range 4 {
		want, _ := g1.Choose("m", "/v1/chat/completions", body(tenant, 0, 1), busy)
		if addr, route := g3.Choose("m", "/v1/chat/completions", body(tenant, 0, 1), busy); addr != want || route != RoutePrefix {
			t.Errorf("tenant %d's first turn at the opening limit: %s (%s), want %s (prefix)", tenant, addr, route, want)
		}
	}
	if n := testutil.CollectAndCount(g3.m.openingWaits); n != 0 {
		t.Errorf("opening waits counted by Choose: %d series, want none", n)
	}
	for _, ep := range g1.tbl.Load().byID {
		if n := ep.Outstanding.Load(); n != 0 {
			t.Errorf("%s: %d in flight after the choices, want 0", ep.inst.ID, n)
		}
	}
}
