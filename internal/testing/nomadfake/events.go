package nomadfake

import (
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Event stream (GET /v1/event/stream), as Nomad 2.0.5's servers serve it
// for the topics Node, Allocation and Job:
//   - Every write that changes nodes, allocations or jobs appends one batch
//     {"Index": N, "Events": [...]} to a buffer of the last
//     DefaultEventBufferSize batches (Nomad's event_buffer_size default;
//     WithEventBuffer), one event per changed object, each with Topic,
//     Type, Key (the object's ID), Namespace, FilterKeys (an allocation's
//     job ID), Index and Payload {"Node": …}, {"Allocation": …} (without
//     its Job, as Nomad strips it) or {"Job": …}.
//   - A subscription answers 200 at once, sends a heartbeat {} first and
//     every heartbeat interval after (30 s, WithEventHeartbeat), and one
//     NDJSON line per batch that holds an event it asked for (?topic=T or
//     T:key, repeated; ?namespace as the other reads, "*" for all; node
//     events have no namespace).
//   - ?index=N starts at the batch of index N, inclusive, as Nomad's
//     broker does; an index older than the buffer starts silently at its
//     oldest batch (a lost index is not an error: a client that must not
//     miss a change reads the lists again). A subscriber that falls so far
//     behind that a batch it has not been sent leaves the buffer is cut
//     off: its stream ends, as Nomad's does with "event dropped from
//     buffer".
//
// Topics other than these three answer 501.

// DefaultEventBufferSize is Nomad's default event_buffer_size.
const DefaultEventBufferSize = 100

// DefaultEventHeartbeat is how often Nomad 2.0.5 sends a heartbeat {} on
// an event stream.
const DefaultEventHeartbeat = 30 * time.Second

// WithEventBuffer keeps the last n event batches (n ≥ 1) instead of
// DefaultEventBufferSize.
func WithEventBuffer(n int) Option {
	return func(s *Server) { s.eventBufSize = max(n, 1) }
}

// WithEventHeartbeat sends an event stream heartbeat every d instead of
// DefaultEventHeartbeat.
func WithEventHeartbeat(d time.Duration) Option {
	return func(s *Server) { s.eventHeartbeat = d }
}

// EndEventStreams ends every open event stream, as a server restart or
// leader change does; subscriptions made after it are served as usual.
func (s *Server) EndEventStreams() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streamsEnd != nil {
		close(s.streamsEnd)
	}
	s.streamsEnd = make(chan struct{})
}

// HoldEventStreams, while on, makes every event stream send nothing (its
// subscriber sees a stream that lags behind the writes); off, each sends
// what it held back, in order. Events held back still leave the buffer as
// usual.
func (s *Server) HoldEventStreams(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streamsHeld = on
	s.notifyLocked()
}

// streamEvent is one event as Nomad writes it on the stream.
type streamEvent struct {
	Topic      string
	Type       string
	Key        string
	Namespace  string
	FilterKeys []string
	Index      uint64
	Payload    json.RawMessage
}

type eventBatch struct {
	Index  uint64
	Events []streamEvent
}

// dirtyObject is an object a write changed, for the event its end emits.
type dirtyObject struct {
	topic, typ, key string
	obj             any // *nodeRecord, *allocRecord, *jobRecord
}

// markLocked notes that a write changed an object: notifyLocked, at the
// write's end, turns every marked object into one event of the batch. A
// later mark of the same object in the same write sets the event's type.
func (s *Server) markLocked(topic, typ, key string, obj any) {
	if s.dirty == nil {
		s.dirty = map[string]*dirtyObject{}
	}
	id := topic + "/" + key
	if j, ok := obj.(*jobRecord); ok {
		id = topic + "/" + *j.job.Namespace + "/" + key
	}
	s.dirty[id] = &dirtyObject{topic: topic, typ: typ, key: key, obj: obj}
}

// markNewLocked is markLocked, unless the write has marked the object
// already (its type stays).
func (s *Server) markNewLocked(topic, typ, key string, obj any) {
	id := topic + "/" + key
	if j, ok := obj.(*jobRecord); ok {
		id = topic + "/" + *j.job.Namespace + "/" + key
	}
	if _, ok := s.dirty[id]; !ok {
		s.markLocked(topic, typ, key, obj)
	}
}

// flushEventsLocked appends the batch of the write that ends now.
func (s *Server) flushEventsLocked() {
	if len(s.dirty) == 0 {
		return
	}
	keys := make([]string, 0, len(s.dirty))
	for k := range s.dirty {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b := &eventBatch{Index: s.index}
	for _, k := range keys {
		d := s.dirty[k]
		ev := streamEvent{Topic: d.topic, Type: d.typ, Key: d.key, Index: s.index}
		var payload any
		switch o := d.obj.(type) {
		case *nodeRecord:
			payload = struct{ Node *api.Node }{o.node}
		case *allocRecord:
			a := *o.Allocation
			a.Job = nil // Nomad strips the job from allocation events
			ev.Namespace, ev.FilterKeys = a.Namespace, []string{a.JobID}
			payload = struct{ Allocation *api.Allocation }{&a}
		case *jobRecord:
			ev.Namespace = *o.job.Namespace
			payload = struct{ Job *api.Job }{o.job}
		}
		raw, err := json.Marshal(payload)
		if err != nil {
			panic("nomadfake: encode event: " + err.Error())
		}
		ev.Payload = raw
		b.Events = append(b.Events, ev)
	}
	clear(s.dirty)
	s.events = append(s.events, b)
	if over := len(s.events) - s.eventBufSize; over > 0 {
		s.eventsDropped = s.events[over-1].Index
		s.events = slices.Delete(s.events, 0, over)
	}
}

// eventTopic is one ?topic= of a subscription.
type eventTopic struct{ topic, key string }

func parseEventTopics(q []string) ([]eventTopic, *httpError) {
	if len(q) == 0 {
		q = []string{"*"}
	}
	var out []eventTopic
	for _, t := range q {
		topic, key, _ := strings.Cut(t, ":")
		if key == "" {
			key = "*"
		}
		switch topic {
		case string(api.TopicNode), string(api.TopicAllocation), string(api.TopicJob):
		default:
			return nil, errorf(http.StatusNotImplemented, "nomadfake: event topic %q is not faked (Node, Allocation and Job are)", topic)
		}
		out = append(out, eventTopic{topic, key})
	}
	return out, nil
}

func (e *streamEvent) matches(topics []eventTopic, ns string) bool {
	if e.Namespace != "" && !nsMatches(ns, e.Namespace) {
		return false
	}
	for _, t := range topics {
		if t.topic != e.Topic {
			continue
		}
		if t.key == "*" || t.key == e.Key || slices.Contains(e.FilterKeys, t.key) {
			return true
		}
	}
	return false
}

func (s *Server) handleEventStream(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		methodNotAllowed(w)
		return
	}
	q := r.URL.Query()
	topics, herr := parseEventTopics(q["topic"])
	if herr != nil {
		writeError(w, herr)
		return
	}
	var from uint64
	if v := q.Get("index"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, errorf(http.StatusBadRequest, "Unable to parse index: %v", err))
			return
		}
		from = n
	}
	ns := namespace(r)
	// The subscription's end is taken before it is answered: an
	// EndEventStreams after the subscriber sees its answer must end it.
	s.mu.Lock()
	if s.streamsEnd == nil {
		s.streamsEnd = make(chan struct{})
	}
	end := s.streamsEnd
	s.mu.Unlock()
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(b []byte) bool {
		if _, err := w.Write(b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	heartbeat := []byte("{}\n")
	if !send(heartbeat) {
		return
	}
	tick := time.NewTicker(s.eventHeartbeat)
	defer tick.Stop()
	// next is the lowest index not yet considered; the first read is
	// inclusive of ?index, as Nomad's.
	next, started := from, false
	for {
		s.mu.Lock()
		cutOff := started && s.eventsDropped != 0 && s.eventsDropped >= next
		var lines [][]byte
		for _, b := range s.events {
			if s.streamsHeld {
				break
			}
			if b.Index < next {
				continue
			}
			var evs []streamEvent
			for i := range b.Events {
				if b.Events[i].matches(topics, ns) {
					evs = append(evs, b.Events[i])
				}
			}
			next = b.Index + 1
			if len(evs) == 0 {
				continue
			}
			line, err := json.Marshal(eventBatch{Index: b.Index, Events: evs})
			if err != nil {
				panic("nomadfake: encode events: " + err.Error())
			}
			lines = append(lines, append(line, '\n'))
		}
		ch := s.changed
		s.mu.Unlock()
		if cutOff {
			// Nomad ends the stream: "event dropped from buffer".
			return
		}
		started = true
		for _, l := range lines {
			if !send(l) {
				return
			}
		}
		select {
		case <-ch:
		case <-tick.C:
			if !send(heartbeat) {
				return
			}
		case <-end:
			return
		case <-s.closed:
			return
		case <-r.Context().Done():
			return
		}
	}
}
