package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controller/render"
)

// Following Nomad. The observer keeps nodes, allocations and llmgw's jobs
// current from Nomad's event stream (/v1/event/stream, topics Node,
// Allocation and Job), so that a change costs one event, not a read of
// the whole list:
//
//  1. Subscribe first, then read the three lists in full (and each node
//     whose ModifyIndex is new), so that no change between the read and
//     the subscription is missed: events at or below a list's index, or
//     not newer than the object held, are skipped.
//  2. Apply every batch the stream delivers, in order, object by object.
//  3. When the stream ends (an error, a server restart, a subscriber cut
//     off for falling behind: "event dropped from buffer"), and every
//     streamResync (Nomad sends no event when it garbage-collects an
//     allocation), go back to 1:
//     Nomad starts a subscription from an index no longer buffered at its
//     oldest event without saying so, so a lost index is never trusted;
//     the lists are read again.
//
// Until the first full read is done the lists are not synced and no pass
// runs (a partial view is never acted on). A read that fails, node reads
// included, fails the whole round, which is retried with backoff (the
// nodes already read are kept, so the retry reads only the rest).
//
// The stream needs, from an ACL token, node:read (topic Node) and the
// namespace capability read-job in the namespace it follows (topic
// Allocation and Job; with nomad.namespaces = ["*"], in every namespace).
// Where it is refused (HTTP 403 or another 4xx/501 at subscription, or a
// subscription answered 200 that ends before its first event
// streamFailuresToFallBack times running: Nomad 2.0.5 answers 200 before
// it checks the token, then closes the connection), and where nomad.namespaces names
// several namespaces, the observer falls back to the blocking queries of
// observer.go, and says so once in its log.

// streamFailuresToFallBack is how many subscriptions in a row may end
// before their first event, within streamEarlyEnd of opening, before the
// stream counts as refused.
const (
	streamFailuresToFallBack = 3
	streamEarlyEnd           = 5 * time.Second
)

// nodeFirstReaders is how many nodes a full read reads at once.
const nodeFirstReaders = 32

// streamResync is how long a round follows the stream before it reads the
// lists in full again: Nomad sends no event when it garbage-collects an
// allocation, so the allocations it dropped leave the view only then (a
// full read re-reads only the nodes whose ModifyIndex moved).
const streamResync = time.Hour

// errListRead: a round could not read a list (each failure is logged with
// the list, as a blocking query's is).
var errListRead = errors.New("read the lists")

// errResync ends a round that has run for streamResync.
var errResync = errors.New("periodic full read")

// errStreamRefused: Nomad does not serve this controller the event stream.
var errStreamRefused = errors.New("event stream refused")

// streamNamespace is the namespace the stream follows: "*" when every
// namespace's allocations count, the one namespace when nomad.namespaces
// is the controller's own; "" when the stream cannot serve (several
// namespaces: one subscription cannot follow a list of them).
func (o *observer) streamNamespace() string {
	nss := o.namespaces
	if len(nss) == 0 {
		return config.AllNamespaces
	}
	for _, ns := range nss {
		if ns == config.AllNamespaces {
			return config.AllNamespaces
		}
	}
	if len(nss) == 1 && nss[0] == o.jobsNamespace() {
		return nss[0]
	}
	return ""
}

// observeLists keeps nodes, allocations and jobs current: through the
// event stream where Nomad serves it, else through blocking queries.
func (o *observer) observeLists(ctx context.Context) {
	ns := o.streamNamespace()
	if !o.eventStream {
		o.log.Debug("nomad.event_stream is off: following nodes, allocations and jobs with blocking queries")
		ns = ""
	}
	if ns != "" {
		err := o.follow(ctx, ns)
		if ctx.Err() != nil {
			return
		}
		o.log.Warn("nomad event stream not served; following nodes, allocations and jobs with blocking queries (each change re-reads its list)",
			"error", err, "needs", "node:read and read-job in the followed namespaces")
	} else if o.eventStream {
		o.log.Info("nomad.namespaces lists several namespaces: following nodes, allocations and jobs with blocking queries, not the event stream",
			"namespaces", o.namespaces)
	}
	var wg sync.WaitGroup
	wg.Go(func() { o.watchNodes(ctx) })
	wg.Go(func() { o.watchAllocs(ctx) })
	wg.Go(func() { o.watchJobs(ctx) })
	wg.Wait()
}

// follow runs rounds of subscribe, read, apply until ctx ends or the
// stream is refused (its error returned).
func (o *observer) follow(ctx context.Context, ns string) error {
	backoff := time.Second
	early := 0
	for ctx.Err() == nil {
		opened := time.Now()
		subscribed, delivered, err := o.followRound(ctx, ns)
		if ctx.Err() != nil {
			return nil
		}
		if isRefusal(err) {
			return err
		}
		if errors.Is(err, errResync) {
			early, backoff = 0, time.Second
			continue
		}
		if subscribed && !delivered && time.Since(opened) < streamEarlyEnd {
			early++
			if early >= streamFailuresToFallBack {
				return fmt.Errorf("%w: %d subscriptions in a row ended before their first event (last: %w)", errStreamRefused, early, err)
			}
		} else if subscribed {
			early = 0
		}
		if delivered {
			backoff = time.Second
		}
		if !errors.Is(err, errListRead) {
			// A list that could not be read was logged as it failed.
			o.log.Warn("nomad event stream ended; reading the lists again", "error", err, "in", backoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, watchMaxBackoff)
	}
	return nil
}

// isRefusal reports whether a subscription's error says the stream will
// not be served (as opposed to a failure worth retrying).
func isRefusal(err error) bool {
	if errors.Is(err, errStreamRefused) {
		return true
	}
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		c := ue.StatusCode()
		return c == http.StatusForbidden || c == http.StatusUnauthorized || c == http.StatusNotFound ||
			c == http.StatusBadRequest || c == http.StatusNotImplemented || c == http.StatusMethodNotAllowed
	}
	return false
}

// eventQueue holds what the stream delivered until it is applied: the
// stream is drained while the lists are read, so Nomad never cuts the
// subscription off for a slow reader.
type eventQueue struct {
	mu      sync.Mutex
	batches []*api.Events
	err     error // the stream's end
	ended   bool
	wake    chan struct{}
}

func (q *eventQueue) take() ([]*api.Events, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.batches
	q.batches = nil
	return b, q.ended, q.err
}

// followRound is one subscription: subscribe, read the lists, apply
// events until the stream ends. subscribed reports whether Nomad answered
// the subscription and the lists were read (the stream's end is then its
// own), delivered whether the stream delivered any event.
func (o *observer) followRound(ctx context.Context, ns string) (subscribed, delivered bool, err error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	topics := map[api.Topic][]string{api.TopicNode: {"*"}, api.TopicAllocation: {"*"}, api.TopicJob: {"*"}}
	ch, err := o.nomad.EventStream().Stream(rctx, topics, 0, &api.QueryOptions{Namespace: ns, Region: o.region})
	if err != nil {
		return false, false, err
	}
	q := &eventQueue{wake: make(chan struct{}, 1)}
	go func() {
		for evs := range ch {
			q.mu.Lock()
			if evs.Err != nil {
				q.err = evs.Err
			} else {
				q.batches = append(q.batches, evs)
			}
			q.mu.Unlock()
			select {
			case q.wake <- struct{}{}:
			default:
			}
		}
		q.mu.Lock()
		q.ended = true
		if q.err == nil {
			q.err = errors.New("stream closed")
		}
		q.mu.Unlock()
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}()

	st, err := o.readLists(rctx, ns)
	if err != nil {
		// Only errListRead wrapped: a list the token may not read (403) is
		// retried as the blocking queries would, not taken for a refused
		// stream; nor does it count as a stream that ended early.
		return false, false, fmt.Errorf("%w: %v", errListRead, err) //nolint:errorlint // see above
	}
	resync := time.NewTimer(streamResync)
	defer resync.Stop()
	for {
		batches, ended, serr := q.take()
		if len(batches) > 0 {
			delivered = true
			o.apply(st, batches)
		}
		if ended {
			return true, delivered, serr
		}
		select {
		case <-ctx.Done():
			return true, delivered, ctx.Err()
		case <-resync.C:
			return true, delivered, errResync
		case <-q.wake:
		}
	}
}

// streamState is what a round holds beside the published snapshot: the
// lists by key, and the index each list was read at.
type streamState struct {
	nodes                        map[string]*api.Node
	allocs                       map[string]*api.AllocationListStub
	jobs                         map[string]*api.JobListStub // by ID (one namespace)
	nodesIdx, allocsIdx, jobsIdx uint64
}

// readLists reads nodes, allocations and jobs in full and publishes them.
func (o *observer) readLists(ctx context.Context, ns string) (*streamState, error) {
	st := &streamState{}
	o.mu.RLock()
	have := o.snap.nodes
	o.mu.RUnlock()

	var stubs []*api.NodeListStub
	var allocs []*api.AllocationListStub
	var jobs []*api.JobListStub
	var nodesMeta, allocMeta, jobsMeta *api.QueryMeta
	errs := make([]error, 3)
	var wg sync.WaitGroup
	read := func(i int, f func(q *api.QueryOptions) error) {
		wg.Go(func() {
			qctx, cancel := context.WithTimeout(ctx, watchWait)
			defer cancel()
			errs[i] = f((&api.QueryOptions{Region: o.region}).WithContext(qctx))
		})
	}
	read(0, func(q *api.QueryOptions) (err error) {
		stubs, nodesMeta, err = o.nomad.Nodes().List(q)
		return err
	})
	read(1, func(q *api.QueryOptions) (err error) {
		q.Namespace = ns
		q.Params = map[string]string{"resources": "true", "task_states": "false"}
		allocs, allocMeta, err = o.nomad.Allocations().List(q)
		return err
	})
	read(2, func(q *api.QueryOptions) (err error) {
		q.Namespace, q.Prefix = o.namespace, render.JobIDPrefix
		q.Params = map[string]string{"meta": "true"}
		jobs, jobsMeta, err = o.nomad.Jobs().List(q)
		return err
	})
	wg.Wait()
	var failed []string
	for i, what := range []string{"nodes", "allocations", "jobs"} {
		if errs[i] != nil {
			if ctx.Err() == nil {
				o.log.Warn("nomad watch failed; retrying", "watch", what, "error", errs[i])
			}
			failed = append(failed, fmt.Sprintf("%s: %v", what, errs[i]))
		}
	}
	if len(failed) > 0 {
		return nil, errors.New(strings.Join(failed, "; "))
	}
	next, unread := o.readNodes(ctx, stubs, have, nodeFirstReaders)
	if unread > 0 {
		// Keep what was read: the retry reads only the rest.
		o.mu.Lock()
		if !o.snap.nodesSynced {
			o.snap.nodes = next
		}
		o.mu.Unlock()
		return nil, fmt.Errorf("%d of %d nodes could not be read", unread, len(stubs))
	}
	st.nodes, st.nodesIdx = next, nodesMeta.LastIndex
	st.allocs = make(map[string]*api.AllocationListStub, len(allocs))
	for _, a := range allocs {
		st.allocs[a.ID] = a
	}
	st.allocsIdx = allocMeta.LastIndex
	st.jobs = make(map[string]*api.JobListStub, len(jobs))
	for _, j := range jobs {
		st.jobs[j.ID] = j
	}
	st.jobsIdx = jobsMeta.LastIndex

	// The jobs table's index going backwards (servers restored from an
	// older snapshot) makes the writes the writer waits for moot. Compared
	// with the table's own last index (lists and job events), not with
	// jobsIndex, which the stream moves past the table's.
	if st.jobsIdx < o.jobsTable {
		o.forgetExpect()
	}
	o.jobsTable = st.jobsIdx
	o.mu.Lock()
	o.snap.nodes, o.snap.nodesSynced = next, true
	o.snap.allocs, o.snap.allocSynced = allocs, true
	o.snap.jobs, o.snap.jobsSynced, o.snap.jobsIndex = jobs, true, st.jobsIdx
	o.notifyLocked()
	o.mu.Unlock()
	o.allocsChanged()
	return st, nil
}

// readNodes reads every node of stubs whose ModifyIndex differs from the
// one held in have, workers at a time (the node list carries no meta).
// A node that cannot be read keeps its old version, if any, and counts
// in failed.
func (o *observer) readNodes(ctx context.Context, stubs []*api.NodeListStub, have map[string]*api.Node, workers int) (map[string]*api.Node, int) {
	next := make(map[string]*api.Node, len(stubs))
	var changed []*api.NodeListStub
	for _, s := range stubs {
		if n, ok := have[s.ID]; ok && n.ModifyIndex == s.ModifyIndex {
			next[s.ID] = n
			continue
		}
		changed = append(changed, s)
	}
	read := make([]*api.Node, len(changed))
	errs := make([]error, len(changed))
	forEach(ctx, len(changed), workers, func(i int) {
		rctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		read[i], _, errs[i] = o.nomad.Nodes().Info(changed[i].ID, (&api.QueryOptions{Region: o.region}).WithContext(rctx))
	})
	failed := 0
	for i, s := range changed {
		if errs[i] != nil || read[i] == nil {
			failed++
			if ctx.Err() == nil {
				o.log.Warn("read node", "node", s.Name, "error", errs[i])
			}
			if old, ok := have[s.ID]; ok {
				next[s.ID] = old
			}
			continue
		}
		next[s.ID] = read[i]
	}
	return next, failed
}

// Nomad's event types that remove a node (its garbage collection).
const typeNodeDeregistration = "NodeDeregistration"

// apply applies batches, in order, to st and publishes each list that
// changed (a new slice or map: the snapshot's are never changed in place).
func (o *observer) apply(st *streamState, batches []*api.Events) {
	var nodes map[string]*api.Node // copy-on-write of st.nodes
	allocsChanged, jobsChanged := false, false
	var last uint64
	for _, b := range batches {
		last = max(last, b.Index)
		for i := range b.Events {
			e := &b.Events[i]
			switch e.Topic {
			case api.TopicNode:
				if e.Index <= st.nodesIdx {
					continue
				}
				n, err := eventObject[api.Node](e, "Node")
				if err != nil || n == nil {
					o.log.Warn("nomad event: unreadable node", "key", e.Key, "error", err)
					continue
				}
				if old, ok := st.nodes[n.ID]; ok && old.ModifyIndex > n.ModifyIndex {
					continue
				}
				if nodes == nil {
					nodes = maps.Clone(st.nodes)
				}
				if e.Type == typeNodeDeregistration {
					delete(nodes, n.ID)
				} else {
					nodes[n.ID] = n
				}
				st.nodes = nodes
			case api.TopicAllocation:
				if e.Index <= st.allocsIdx {
					continue
				}
				a, err := eventObject[api.Allocation](e, "Allocation")
				if err != nil || a == nil {
					o.log.Warn("nomad event: unreadable allocation", "key", e.Key, "error", err)
					continue
				}
				if !o.countsNamespace(a.Namespace) {
					continue
				}
				if old, ok := st.allocs[a.ID]; ok && old.ModifyIndex > a.ModifyIndex {
					continue
				}
				stub := a.Stub()
				stub.TaskStates = nil // never read, as the list is asked without them
				stub.AllocatedResources = a.AllocatedResources
				st.allocs[a.ID] = stub
				allocsChanged = true
			case api.TopicJob:
				if e.Index <= st.jobsIdx {
					continue
				}
				j, err := eventObject[api.Job](e, "Job")
				deleted, _ := e.Payload["Deleted"].(bool)
				if err != nil || j == nil || j.ID == nil {
					o.log.Warn("nomad event: unreadable job", "key", e.Key, "error", err)
					continue
				}
				ns := api.DefaultNamespace
				if j.Namespace != nil && *j.Namespace != "" {
					ns = *j.Namespace
				}
				if ns != o.jobsNamespace() || !strings.HasPrefix(*j.ID, render.JobIDPrefix) {
					continue
				}
				if deleted {
					delete(st.jobs, *j.ID)
					jobsChanged = true
					o.jobsTable = max(o.jobsTable, e.Index)
					continue
				}
				stub := jobStub(j)
				if old, ok := st.jobs[stub.ID]; ok && old.ModifyIndex > stub.ModifyIndex {
					continue
				}
				st.jobs[stub.ID] = stub
				jobsChanged = true
				o.jobsTable = max(o.jobsTable, e.Index)
			}
		}
	}
	o.mu.Lock()
	if nodes != nil {
		o.snap.nodes = nodes
		o.notifyLocked()
	}
	if allocsChanged {
		list := make([]*api.AllocationListStub, 0, len(st.allocs))
		for _, a := range st.allocs {
			list = append(list, a)
		}
		o.snap.allocs = list
	}
	if jobsChanged {
		list := make([]*api.JobListStub, 0, len(st.jobs))
		for _, j := range st.jobs {
			list = append(list, j)
		}
		o.snap.jobs = list
	}
	// The stream is ordered and complete: every job change up to the last
	// batch's index is applied, so the job list stands at that index.
	o.snap.jobsIndex = max(o.snap.jobsIndex, last)
	o.mu.Unlock()
	switch {
	case allocsChanged:
		o.allocsChanged()
	case nodes != nil || jobsChanged:
		o.kick()
	}
}

// eventObject decodes the member key of an event's payload (Node,
// Allocation, Job) as the lists and reads do, with encoding/json. Not with
// the api package's Event.Node and the like: they decode with
// mapstructure, which ignores json tags, so api.Attribute's values
// (FloatVal and the rest, tagged "Float", "Int", "String", "Bool") came
// out nil and a node from an event lost every device attribute: a GPU's
// power_limit read 0 and the draw derived from it too (on Nomad 2.0.5,
// TestPowerCapsOnRealNomad's replicas placed while following the stream
// were registered with 0 W).
func eventObject[T any](e *api.Event, key string) (*T, error) {
	v, ok := e.Payload[key]
	if !ok || v == nil {
		return nil, fmt.Errorf("no %s in the payload", key)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return out, nil
}

// jobsNamespace is the namespace of llmgw's jobs (nomad.namespace).
func (o *observer) jobsNamespace() string {
	if o.namespace == "" {
		return api.DefaultNamespace
	}
	return o.namespace
}

// countsNamespace reports whether ns's allocations count (nomad.namespaces).
func (o *observer) countsNamespace(ns string) bool {
	if ns == "" {
		ns = api.DefaultNamespace
	}
	if len(o.namespaces) == 0 {
		return true
	}
	for _, n := range o.namespaces {
		if n == config.AllNamespaces || n == ns {
			return true
		}
	}
	return false
}

// allocsChanged wakes the health reader and asks for a pass.
func (o *observer) allocsChanged() {
	select {
	case o.healthTrigger <- struct{}{}:
	default:
	}
	o.kick()
}

// jobStub is the job list's stub of a job from a Job event.
func jobStub(j *api.Job) *api.JobListStub {
	s := &api.JobListStub{
		ID: *j.ID, Meta: j.Meta, Datacenters: j.Datacenters,
		Periodic: j.Periodic != nil, ParameterizedJob: j.ParameterizedJob != nil,
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	u64 := func(p *uint64) uint64 {
		if p == nil {
			return 0
		}
		return *p
	}
	s.ParentID, s.Name, s.Namespace, s.Type = str(j.ParentID), str(j.Name), str(j.Namespace), str(j.Type)
	s.Status, s.StatusDescription = str(j.Status), str(j.StatusDescription)
	if j.Priority != nil {
		s.Priority = *j.Priority
	}
	if j.Stop != nil {
		s.Stop = *j.Stop
	}
	if j.SubmitTime != nil {
		s.SubmitTime = *j.SubmitTime
	}
	s.CreateIndex, s.ModifyIndex, s.JobModifyIndex = u64(j.CreateIndex), u64(j.ModifyIndex), u64(j.JobModifyIndex)
	return s
}
