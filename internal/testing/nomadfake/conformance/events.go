package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// eventLog collects what an event stream delivers, for eventually.
type eventLog struct {
	mu     sync.Mutex
	events []api.Event
	err    error
	ended  bool
}

func (l *eventLog) snapshot() ([]api.Event, error, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events), l.err, l.ended
}

// subscribe opens the event stream on topics from index and collects its
// events until the test ends.
func (tg *Target) subscribe(t *testing.T, topics map[api.Topic][]string, index uint64) *eventLog {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	ch, err := tg.Client.EventStream().Stream(ctx, topics, index, nil)
	if err != nil {
		t.Fatalf("event stream %v from %d: %v", topics, index, err)
	}
	l := &eventLog{}
	go func() {
		for evs := range ch {
			l.mu.Lock()
			if evs.Err != nil && ctx.Err() == nil {
				l.err = evs.Err
			}
			for _, e := range evs.Events {
				if e.Index != evs.Index {
					l.err = fmt.Errorf("event %s/%s at index %d in a batch of index %d", e.Topic, e.Key, e.Index, evs.Index)
				}
				l.events = append(l.events, e)
			}
			l.mu.Unlock()
		}
		l.mu.Lock()
		l.ended = true
		l.mu.Unlock()
	}()
	return l
}

// waitEvent waits until the stream has delivered an event ok accepts and
// returns the first such.
func (l *eventLog) waitEvent(t *testing.T, what string, ok func(api.Event) bool) api.Event {
	t.Helper()
	var found api.Event
	eventually(t, what, func() (bool, string) {
		evs, err, ended := l.snapshot()
		if err != nil {
			t.Fatalf("%s: stream error: %v", what, err)
		}
		var seen []string
		for _, e := range evs {
			if ok(e) {
				found = e
				return true, ""
			}
			seen = append(seen, fmt.Sprintf("%s/%s/%s@%d", e.Topic, e.Type, e.Key, e.Index))
		}
		if ended {
			t.Fatalf("%s: stream ended; saw %s", what, strings.Join(seen, " "))
		}
		return false, "saw " + strings.Join(seen, " ")
	})
	return found
}

// EventStreamFollowsChanges: GET /v1/event/stream delivers, for the
// topics asked, one event per changed object: a job's registration (Job,
// Key its ID, Payload.Job), its allocation's placement and client updates
// (Allocation, Key the allocation ID, FilterKeys with the job ID,
// Payload.Allocation without its Job), and a node's update (Node, Key its
// ID, Payload.Node whole, with its meta); every event's Index is its
// batch's; a subscription from a write's index starts with that write
// (inclusive); a topic key selects one object.
func EventStreamFollowsChanges(t *testing.T, tg *Target) {
	id := "conf-events"
	j := tg.job(id, tg.Nodes[0], 1, 0)
	_, wm, err := tg.Client.Jobs().Register(j, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg.cleanup(t, id)
	all := tg.subscribe(t, map[api.Topic][]string{api.TopicJob: {id}, api.TopicAllocation: {id}}, wm.LastIndex)
	jobEv := all.waitEvent(t, "the registration's Job event", func(e api.Event) bool {
		return e.Topic == api.TopicJob && e.Key == id
	})
	if jobEv.Index != wm.LastIndex {
		t.Errorf("first Job event of %s at index %d; want the registration's, %d (a subscription from an index includes it)", id, jobEv.Index, wm.LastIndex)
	}
	job, err := jobEv.Job()
	if err != nil || job == nil || *job.ID != id {
		t.Fatalf("Job event payload: %v, %v", job, err)
	}
	running := all.waitEvent(t, "an Allocation event of "+id+" running", func(e api.Event) bool {
		if e.Topic != api.TopicAllocation {
			return false
		}
		a, err := e.Allocation()
		return err == nil && a != nil && a.ClientStatus == api.AllocClientStatusRunning
	})
	a, err := running.Allocation()
	if err != nil {
		t.Fatal(err)
	}
	if a.JobID != id || a.NodeName != tg.Nodes[0] || running.Key != a.ID || !slices.Contains(running.FilterKeys, id) {
		t.Errorf("Allocation event: key %s, filter keys %v, job %s on %s (alloc %s); want keyed by the allocation, filtered by job %s, on %s",
			running.Key, running.FilterKeys, a.JobID, a.NodeName, a.ID, id, tg.Nodes[0])
	}
	if a.Job != nil {
		t.Errorf("Allocation event carries its job; Nomad strips it")
	}
	if a.ModifyIndex == 0 || a.ModifyIndex > running.Index {
		t.Errorf("Allocation event at %d carries ModifyIndex %d", running.Index, a.ModifyIndex)
	}
	evs, _, _ := all.snapshot()
	for _, e := range evs {
		if e.Topic == api.TopicNode {
			t.Errorf("a Node event on a stream that asked for Job and Allocation: %s", e.Key)
		}
	}

	nodeID := tg.nodeID(t, tg.Nodes[0])
	nodes := tg.subscribe(t, map[api.Topic][]string{api.TopicNode: {nodeID}}, 0)
	const dyn = "conformance.events"
	apply := func(m map[string]*string) {
		if _, err := tg.Client.Nodes().Meta().Apply(&api.NodeMetaApplyRequest{NodeID: nodeID, Meta: m}, nil); err != nil {
			t.Fatal(err)
		}
	}
	apply(map[string]*string{dyn: new("v1")})
	t.Cleanup(func() { apply(map[string]*string{dyn: nil}) })
	nodeEv := nodes.waitEvent(t, "a Node event with "+dyn+"=v1", func(e api.Event) bool {
		n, err := e.Node()
		return e.Topic == api.TopicNode && err == nil && n != nil && n.Meta[dyn] == "v1"
	})
	n, _ := nodeEv.Node()
	if nodeEv.Key != nodeID || n.ID != nodeID || n.Name != tg.Nodes[0] || n.NodeResources == nil || n.Meta[StaticMetaKey] != StaticMetaValue {
		t.Errorf("Node event: key %s, node %s %s, resources %v, meta %v; want the whole node %s", nodeEv.Key, n.ID, n.Name, n.NodeResources != nil, n.Meta, tg.Nodes[0])
	}
	if n.ModifyIndex == 0 || n.ModifyIndex > nodeEv.Index {
		t.Errorf("Node event at %d carries ModifyIndex %d", nodeEv.Index, n.ModifyIndex)
	}
}

// EventStreamLostIndex: the servers keep a bounded buffer of recent
// writes' events (event_buffer_size, 100 by default). A subscription
// from an index that has left the buffer is no error: it starts silently
// at the oldest write still buffered, so its first event is later than
// the index asked for and the changes in between are never sent. A client
// that must not miss a change reads the lists again after (re)subscribing.
func EventStreamLostIndex(t *testing.T, tg *Target) {
	id := "conf-lost-index"
	j := tg.job(id, tg.Nodes[0], 0, 0)
	_, wm, err := tg.Client.Jobs().Register(j, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg.cleanup(t, id)
	first := wm.LastIndex
	// More writes than the default buffer holds, each a new version.
	const writes = 120
	var last uint64
	for i := range writes {
		j.SetMeta("conformance.version", fmt.Sprint(i))
		_, wm, err := tg.Client.Jobs().Register(j, nil)
		if err != nil {
			t.Fatal(err)
		}
		last = wm.LastIndex
	}
	l := tg.subscribe(t, map[api.Topic][]string{api.TopicJob: {id}}, first)
	ev := l.waitEvent(t, "a Job event of "+id, func(e api.Event) bool { return e.Topic == api.TopicJob && e.Key == id })
	if ev.Index <= first {
		t.Errorf("subscribed from index %d, %d writes ago: first event at %d; want it lost (later than %d)", first, writes, ev.Index, first)
	}
	if ev.Index > last {
		t.Errorf("first event at %d, after the last write (%d)", ev.Index, last)
	}
	if _, err, ended := l.snapshot(); err != nil || ended {
		t.Errorf("a lost index ended the stream (%v, ended %v); Nomad starts at the oldest buffered write", err, ended)
	}
}
