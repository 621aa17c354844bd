package nomadfake_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/internal/testing/nomadfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// rawStream reads GET /v1/event/stream?<query> line by line.
type rawStream struct {
	mu    sync.Mutex
	lines []string
	ended bool
}

func openRawStream(t *testing.T, s *nomadfake.Server, query string) *rawStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/v1/event/stream?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("event stream: %d %s", resp.StatusCode, b)
	}
	rs := &rawStream{}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			rs.mu.Lock()
			rs.lines = append(rs.lines, sc.Text())
			rs.mu.Unlock()
		}
		rs.mu.Lock()
		rs.ended = true
		rs.mu.Unlock()
	}()
	return rs
}

func (rs *rawStream) state() ([]string, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]string(nil), rs.lines...), rs.ended
}

// batches decodes the non-heartbeat lines.
func batches(t *testing.T, lines []string) []api.Events {
	t.Helper()
	var out []api.Events
	for _, l := range lines {
		if l == "{}" {
			continue
		}
		var e api.Events
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, e)
	}
	return out
}

func TestEventStreamTopicsKeysAndPayloads(t *testing.T) {
	s, c := newFake(t, nomadfake.WithAutoRun(true))
	n1 := gpuNode(s, "n1", 2, map[string]string{"llmgw.rack": "r1"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	nodes, err := c.EventStream().Stream(ctx, map[api.Topic][]string{api.TopicNode: {"*"}}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	allocs, err := c.EventStream().Stream(ctx, map[api.Topic][]string{api.TopicAllocation: {"j1"}}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := <-nodes
	if ev.Err != nil || len(ev.Events) != 1 || ev.Events[0].Key != n1 || ev.Events[0].Type != "NodeRegistration" {
		t.Fatalf("first node batch: %+v", ev)
	}
	n, err := ev.Events[0].Node()
	if err != nil || n.Meta["llmgw.rack"] != "r1" || len(n.NodeResources.Devices[0].Instances) != 2 {
		t.Fatalf("node payload: %+v %v", n, err)
	}
	if _, _, err := c.Jobs().Register(gpuJob("j2", 1, 1), nil); err != nil {
		t.Fatal(err)
	}
	_, wm, err := c.Jobs().Register(gpuJob("j1", 1, 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	ev = <-allocs
	if ev.Err != nil || ev.Index != wm.LastIndex || len(ev.Events) != 1 {
		t.Fatalf("first allocation batch of j1 (j2's must not be sent): %+v, want one event at %d", ev, wm.LastIndex)
	}
	a, err := ev.Events[0].Allocation()
	if err != nil || a.JobID != "j1" || a.Job != nil || a.ClientStatus != api.AllocClientStatusRunning || ev.Events[0].Key != a.ID {
		t.Fatalf("allocation payload: %+v %v", a, err)
	}
	if err := s.SetNodeStatus(n1, api.NodeStatusDown); err != nil {
		t.Fatal(err)
	}
	ev = <-nodes
	if len(ev.Events) != 1 || ev.Events[0].Type != "NodeEvent" {
		t.Fatalf("node down: %+v", ev)
	}
	if n, _ := ev.Events[0].Node(); n.Status != api.NodeStatusDown || n.ModifyIndex != ev.Index {
		t.Fatalf("node down payload: status %s modify %d, batch %d", n.Status, n.ModifyIndex, ev.Index)
	}
	ev = <-allocs
	if a, _ := ev.Events[0].Allocation(); a.ClientStatus != api.AllocClientStatusLost {
		t.Fatalf("allocation after its node went down: %+v", a)
	}

	// Topics not faked are refused, not silently empty.
	_, err = c.EventStream().Stream(ctx, map[api.Topic][]string{api.TopicDeployment: nil}, 0, nil)
	if statusCode(err) != http.StatusNotImplemented {
		t.Fatalf("Deployment topic: %v, want 501", err)
	}
}

func TestEventStreamLostIndexStartsAtOldest(t *testing.T) {
	s, _ := newFake(t, nomadfake.WithEventBuffer(3))
	var ids []string
	for i := range 5 {
		ids = append(ids, gpuNode(s, fmt.Sprintf("n%d", i), 1, nil))
	}
	rs := openRawStream(t, s, "topic=Node&index=1")
	var got []api.Events
	wait.For(t, "the three buffered batches", func() (bool, string) {
		lines, _ := rs.state()
		got = batches(t, lines)
		return len(got) == 3, fmt.Sprint(lines)
	})
	for i, b := range got {
		if b.Events[0].Key != ids[i+2] {
			t.Errorf("batch %d is node %s; want %s (the oldest still buffered first)", i, b.Events[0].Key, ids[i+2])
		}
	}
	if _, ended := rs.state(); ended {
		t.Error("a lost index ended the stream")
	}
}

func TestEventStreamCutsOffASubscriberThatFellBehind(t *testing.T) {
	s, _ := newFake(t, nomadfake.WithEventBuffer(2))
	id := gpuNode(s, "n1", 8, map[string]string{"pad": strings.Repeat("x", 4096)})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/v1/event/stream?topic=Node", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.Config().HttpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Not read meanwhile: the socket's buffers fill, the handler blocks,
	// and the buffer of two moves on without it.
	const writes = 4000
	for i := range writes {
		st := api.NodeStatusReady
		if i%2 == 0 {
			st = api.NodeStatusInit
		}
		if err := s.SetNodeStatus(id, st); err != nil {
			t.Fatal(err)
		}
	}
	b, err := io.ReadAll(resp.Body) // ends only if the fake cut it off
	if err != nil {
		t.Fatal(err)
	}
	n := strings.Count(string(b), "\n")
	if n >= writes {
		t.Fatalf("read %d lines for %d writes; want the stream cut off before the end", n, writes)
	}
}

func TestEventStreamHeartbeats(t *testing.T) {
	s, _ := newFake(t, nomadfake.WithEventHeartbeat(5*time.Millisecond))
	rs := openRawStream(t, s, "topic=Job")
	wait.For(t, "three heartbeats", func() (bool, string) {
		lines, _ := rs.state()
		return len(lines) >= 3 && lines[0] == "{}" && lines[2] == "{}", fmt.Sprint(lines)
	})
}

func TestTrafficByEndpoint(t *testing.T) {
	s, c := newFake(t, nomadfake.WithoutRequestLog())
	id := gpuNode(s, "n1", 1, nil)
	for range 3 {
		if _, _, err := c.Nodes().Info(id, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := c.Nodes().List(nil); err != nil {
		t.Fatal(err)
	}
	tr := s.Traffic()
	if got := tr["GET /v1/node/:id"]; got.Requests != 3 || got.Bytes < 3*500 {
		t.Errorf("node reads: %+v", got)
	}
	if got := tr["GET /v1/nodes"]; got.Requests != 1 || got.Bytes == 0 {
		t.Errorf("node list: %+v", got)
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("WithoutRequestLog logged %d requests", n)
	}
}

// EndEventStreams ends a subscription whose answer its subscriber has
// already seen, however soon after it comes (it once missed those that
// had not yet taken their first look at the buffer).
func TestEndEventStreamsEndsAnsweredSubscriptions(t *testing.T) {
	s, _ := newFake(t)
	for i := range 50 {
		rs := openRawStream(t, s, "topic=Node:*")
		s.EndEventStreams()
		wait.For(t, fmt.Sprintf("subscription %d to end", i), func() (bool, string) {
			_, ended := rs.state()
			return ended, "still open"
		})
	}
}
