package consulfake

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"
)

func TestHealthFiltersAndBlocks(t *testing.T) {
	s := New()
	defer s.Close()
	c := s.Client(t)
	s.Register(Service{ID: "a", Name: "svc", Tags: []string{"x", "y"}, Address: "10.0.0.1", Port: 1})
	s.Register(Service{ID: "b", Name: "svc", Tags: []string{"x"}, Port: 2, NodeAddress: "10.0.0.9", Weight: 3})
	s.Register(Service{ID: "c", Name: "other", Tags: []string{"z"}, Port: 3, Status: Critical})

	ids := func(es []*api.ServiceEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Service.ID)
		}
		return out
	}
	es, meta, err := c.Health().Service("svc", "x", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b"}, ids(es)); diff != "" {
		t.Errorf("tag x (-want +got):\n%s", diff)
	}
	if es[1].Node.Address != "10.0.0.9" || es[1].Service.Weights.Passing != 3 {
		t.Errorf("b: node address %q, weight %d", es[1].Node.Address, es[1].Service.Weights.Passing)
	}
	es, _, _ = c.Health().Service("svc", "y", true, nil)
	if diff := cmp.Diff([]string{"a"}, ids(es)); diff != "" {
		t.Errorf("tag y (-want +got):\n%s", diff)
	}
	es, _, _ = c.Health().Service("other", "", true, nil)
	if len(es) != 0 {
		t.Errorf("critical instance listed as passing: %v", ids(es))
	}
	es, _, _ = c.Health().Service("other", "", false, nil)
	if diff := cmp.Diff([]string{"c"}, ids(es)); diff != "" {
		t.Errorf("all of other (-want +got):\n%s", diff)
	}
	svcs, _, err := c.Catalog().Services(nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{"svc": {"x", "y"}, "other": {"z"}}, svcs); diff != "" {
		t.Errorf("catalog (-want +got):\n%s", diff)
	}

	// A blocking query waits for a change past its index.
	done := make(chan []string, 1)
	go func() {
		es, _, err := c.Health().Service("svc", "", true, &api.QueryOptions{WaitIndex: meta.LastIndex, WaitTime: time.Minute})
		if err != nil {
			t.Error(err)
		}
		done <- ids(es)
	}()
	select {
	case got := <-done:
		t.Fatalf("blocking query returned before any change: %v", got)
	case <-time.After(50 * time.Millisecond):
	}
	s.SetStatus("a", Critical)
	select {
	case got := <-done:
		if diff := cmp.Diff([]string{"b"}, got); diff != "" {
			t.Errorf("after a went critical (-want +got):\n%s", diff)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("blocking query did not return after a change")
	}
	// With a wait and no change, it answers at the wait's end.
	_, m2, err := c.Health().Service("svc", "", true, &api.QueryOptions{WaitIndex: s.Index(), WaitTime: 10 * time.Millisecond})
	if err != nil || m2.LastIndex != s.Index() {
		t.Errorf("timed-out query: index %d, %v; want %d", m2.LastIndex, err, s.Index())
	}
}

func TestAgentRegister(t *testing.T) {
	s := New()
	defer s.Close()
	c := s.Client(t)
	err := c.Agent().ServiceRegister(&api.AgentServiceRegistration{ID: "g1", Name: "gw", Port: 80,
		Check: &api.AgentServiceCheck{HTTP: "http://127.0.0.1/healthz", Interval: "10s"}})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := s.Service("g1")
	if !ok || got.Status != Critical || got.Check.HTTP != "http://127.0.0.1/healthz" {
		t.Errorf("registered: %+v", got)
	}
	if err := c.Agent().ServiceDeregister("g1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Agent().ServiceDeregister("g1"); err == nil {
		t.Error("deregistering an unknown ID succeeded")
	}
	if _, ok := s.Service("g1"); ok {
		t.Error("still registered")
	}
}
