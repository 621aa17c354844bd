package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/internal/testing/hubserver"
	"github.com/llmgw/llmgw/internal/testing/localnomad"
	"github.com/llmgw/llmgw/weights"
)

// The chaos suite's model store (issue 35): beta's weights come from a
// local hub through each node's store, and the store's faults are
// injected beside the others.
const (
	chaosRepo = "org/beta"
	chaosFile = "tiny.gguf"
	// chaosFillerRepo is a second model of beta's size: store-full puts it
	// in the stores beta's fetch is forced onto, in use, so that beta finds
	// no room under the node's store_budget_bytes.
	chaosFillerRepo = "org/filler"
	chaosFillerFile = "filler.gguf"
	// chaosFillerOwner names the test's lease on the filler.
	chaosFillerOwner = "chaos-store-full"
)

// chaosStoreKinds are the store's faults. Each needs a fetch: the test
// removes beta's weights from the stores of the nodes that run no beta,
// arms the fault, and kills a node whose beta replicas the rack spread must
// re-place onto one of those nodes (pickFetchTarget).
var chaosStoreKinds = []string{"fetch-cut", "hub-stall", "hub-503", "hub-404", "store-full"}

var (
	chaosBetaSource   = weights.Source{Hub: &weights.Hub{Repo: chaosRepo, Revision: "main", Files: []string{chaosFile}}}
	chaosFillerSource = weights.Source{Hub: &weights.Hub{Repo: chaosFillerRepo, Revision: "main", Files: []string{chaosFillerFile}}}
)

// chaosStore is the hub, the nodes' stores, and what the invariants
// gathered about them.
type chaosStore struct {
	hub    *hubserver.Server
	stores map[string]string // node name -> its model store (model_cache)
	size   int64             // beta's file
	sha    string            // its sha256, as the hub serves it
	budget int64             // every node's store_budget_bytes: room for one model
	key    string            // beta's weights key

	mu sync.Mutex
	// removed: when the test removed beta from a node's store; each
	// removal starts a new epoch, in which one fetch is allowed again.
	removed map[string][]time.Time
	// events: every event seen of beta's allocations, merged over samples
	// (Nomad keeps a task's last 10).
	events map[string]*chaosAllocEvents
	seen   map[string]bool // events already counted or checked
	// Fetches counted per node and epoch, from Nomad's task events ("Fetch
	// finished" with fetched bytes > 0) and from the stores' records (a new
	// fetched_at with fetch.bytes > 0).
	byEvents, byRecord map[string]map[int]int
	lastRec            map[string]time.Time
	fetches            []chaosStoreEvent // whole fetches, from the events
	failures           []chaosStoreEvent // "Weights not fetched", "Fetch retry"
	starts             int               // engine starts checked
	unverifiable       int               // engine starts whose file the test removed before it could hash it
	hashes             map[string]chaosHash
}

type chaosAllocEvents struct {
	node  string
	tasks map[string][]*api.TaskEvent
}

type chaosStoreEvent struct {
	node, alloc, msg string
	at               time.Time
	bytes            int64
}

type chaosHash struct {
	size int64
	mod  time.Time
	sum  string
}

func newChaosStore(hub *hubserver.Server, stores map[string]string, model string, budget int64) (*chaosStore, error) {
	fi, err := os.Stat(model)
	if err != nil {
		return nil, err
	}
	sum, err := sha256File(model)
	if err != nil {
		return nil, err
	}
	return &chaosStore{hub: hub, stores: stores, size: fi.Size(), sha: sum, budget: budget, key: chaosBetaSource.Key(),
		removed: map[string][]time.Time{}, events: map[string]*chaosAllocEvents{}, seen: map[string]bool{},
		byEvents: map[string]map[int]int{}, byRecord: map[string]map[int]int{}, lastRec: map[string]time.Time{},
		hashes: map[string]chaosHash{}}, nil
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hash is path's sha256 (following links), cached by size and mtime.
func (s *chaosStore) hash(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	h, ok := s.hashes[path]
	s.mu.Unlock()
	if ok && h.size == fi.Size() && h.mod.Equal(fi.ModTime()) {
		return h.sum, nil
	}
	sum, err := sha256File(path)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	s.hashes[path] = chaosHash{size: fi.Size(), mod: fi.ModTime(), sum: sum}
	s.mu.Unlock()
	return sum, nil
}

// epochLocked is the epoch of node's store at t: how often the test had
// removed beta from it before t.
func (s *chaosStore) epochLocked(node string, t time.Time) int {
	n := 0
	for _, at := range s.removed[node] {
		if at.Before(t) {
			n++
		}
	}
	return n
}

func (s *chaosStore) removedAfterLocked(node string, t time.Time) bool {
	for _, at := range s.removed[node] {
		if at.After(t) {
			return true
		}
	}
	return false
}

func (s *chaosStore) recordPath(node string) string {
	return filepath.Join(s.stores[node], ".llmgw", "models", s.key+".json")
}

func (s *chaosStore) repoDir(node, repo string) string {
	return filepath.Join(s.stores[node], "hub", "models--"+strings.ReplaceAll(repo, "/", "--"))
}

// flockNB takes the store's lock file path as the store does (flock), or
// fails at once when another process holds it.
func flockNB(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { _ = f.Close() }, nil
}

// removeBeta removes beta's weights from node's store as the store's own
// eviction does (the record first, then the files), holding the store's
// model lock so that no fetch runs meanwhile, and only while no live
// process holds a lease on them (no replica there uses them).
func (s *chaosStore) removeBeta(node string) error {
	dir := s.stores[node]
	st, err := weights.Open(weights.Config{Dir: dir})
	if err != nil {
		return err
	}
	if st.InUse(s.key) {
		return fmt.Errorf("%s: a live process holds a lease on %s", node, chaosRepo)
	}
	unlock, err := flockNB(filepath.Join(dir, ".llmgw", "locks", "model-"+s.key))
	if err != nil {
		return fmt.Errorf("%s: a fetch of %s runs (its lock is held): %w", node, chaosRepo, err)
	}
	defer unlock()
	if err := os.Remove(s.recordPath(node)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.RemoveAll(s.repoDir(node, chaosRepo)); err != nil {
		return err
	}
	s.mu.Lock()
	s.removed[node] = append(s.removed[node], time.Now())
	s.mu.Unlock()
	return nil
}

// fill puts the filler model in node's store (a fetch from the hub, under
// the node's budget) and holds a lease on it in the test's name, so that
// the store may not evict it: the store then has no room for beta.
func (s *chaosStore) fill(ctx context.Context, node string) error {
	st, err := weights.Open(weights.Config{Dir: s.stores[node], HubURL: s.hub.URL(), BudgetBytes: s.budget})
	if err != nil {
		return err
	}
	m, err := st.Ensure(ctx, chaosFillerSource, "", nil)
	if err != nil {
		return err
	}
	return st.Acquire(m.Key, chaosFillerOwner, os.Getpid())
}

// unfill drops the test's lease on the filler: the store may evict it.
func (s *chaosStore) unfill(node string) error {
	st, err := weights.Open(weights.Config{Dir: s.stores[node]})
	if err != nil {
		return err
	}
	return st.Release(chaosFillerSource.Key(), chaosFillerOwner)
}

func eventMsg(e *api.TaskEvent) string {
	if e.DisplayMessage != "" {
		return e.DisplayMessage
	}
	if e.DriverMessage != "" {
		return e.DriverMessage
	}
	return e.Message
}

func isBetaJob(id string) bool { return strings.HasPrefix(id, render.JobIDPrefix+"beta-") }

// merge adds a's events to what was seen of it and returns its merged
// events by task, in time order.
func (s *chaosStore) mergeLocked(a *api.AllocationListStub) *chaosAllocEvents {
	ae := s.events[a.ID]
	if ae == nil {
		ae = &chaosAllocEvents{node: a.NodeName, tasks: map[string][]*api.TaskEvent{}}
		s.events[a.ID] = ae
	}
	for task, ts := range a.TaskStates {
		if ts == nil {
			continue
		}
		have := ae.tasks[task]
		for _, e := range ts.Events {
			if !slices.ContainsFunc(have, func(h *api.TaskEvent) bool {
				return h.Time == e.Time && h.Type == e.Type && eventMsg(h) == eventMsg(e)
			}) {
				have = append(have, e)
			}
		}
		sort.SliceStable(have, func(i, j int) bool { return have[i].Time < have[j].Time })
		ae.tasks[task] = have
	}
	return ae
}

func fetchedBytes(e *api.TaskEvent) int64 {
	if v, ok := e.Details["fetched_bytes"]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	if strings.Contains(eventMsg(e), ", 0 B fetched") {
		return 0
	}
	return -1 // not said, but fetched
}

// modelArg is the path after -m in an engine's command line.
func modelArg(cmd string) string {
	f := strings.Fields(cmd)
	for i, a := range f {
		if (a == "-m" || a == "--model") && i+1 < len(f) {
			return strings.Trim(f[i+1], `'"`)
		}
	}
	return ""
}

// checkStore checks the store's invariants on one sample of Nomad's
// allocations: every engine start of beta came after its node's store
// said the weights were whole (a "Fetch finished" or "Weights present"
// event of the same allocation since the task's previous start), on a
// model file in that node's store, not an .incomplete part, whose sha256
// is the hub's; and no node fetched beta twice in one epoch (counted from
// the task events here and from the stores' records in sampleRecords).
func (r *chaosRun) checkStore(v fleetView) {
	s := r.store
	type started struct {
		node, alloc, cmd string
		at               time.Time
		ok               bool
	}
	var starts []started
	var twice []string
	s.mu.Lock()
	for _, a := range v.allocs {
		if !isBetaJob(a.JobID) {
			continue
		}
		ae := s.mergeLocked(a)
		var weightsAt []int64 // "Fetch finished" and "Weights present", either task
		for _, task := range []string{render.FetchTaskName, render.TaskName} {
			for _, e := range ae.tasks[task] {
				msg := eventMsg(e)
				key := fmt.Sprintf("%s/%s/%d/%s", a.ID, task, e.Time, msg)
				switch {
				case strings.HasPrefix(msg, "Fetch finished") || strings.HasPrefix(msg, "Weights present"):
					weightsAt = append(weightsAt, e.Time)
					if s.seen[key] || !strings.HasPrefix(msg, "Fetch finished") {
						continue
					}
					s.seen[key] = true
					n := fetchedBytes(e)
					if n == 0 {
						continue
					}
					at := time.Unix(0, e.Time)
					s.fetches = append(s.fetches, chaosStoreEvent{node: ae.node, alloc: a.ID, msg: msg, at: at, bytes: n})
					ep := s.epochLocked(ae.node, at)
					if s.byEvents[ae.node] == nil {
						s.byEvents[ae.node] = map[int]int{}
					}
					s.byEvents[ae.node][ep]++
					if s.byEvents[ae.node][ep] > 1 {
						twice = append(twice, fmt.Sprintf("%s fetched %s %d times without the test removing it between (task events; the last: alloc %s %s)",
							ae.node, chaosRepo, s.byEvents[ae.node][ep], a.ID[:8], msg))
					}
				case strings.HasPrefix(msg, "Weights not fetched") || strings.HasPrefix(msg, "Fetch retry"):
					if !s.seen[key] {
						s.seen[key] = true
						s.failures = append(s.failures, chaosStoreEvent{node: ae.node, alloc: a.ID, msg: msg, at: time.Unix(0, e.Time)})
					}
				}
			}
		}
		var prev int64
		for _, e := range ae.tasks[render.TaskName] {
			msg := eventMsg(e)
			if !strings.HasPrefix(msg, "Started llamacpp") {
				continue
			}
			key := fmt.Sprintf("%s/start/%d", a.ID, e.Time)
			after := prev
			prev = e.Time
			if s.seen[key] {
				continue
			}
			s.seen[key] = true
			ok := slices.ContainsFunc(weightsAt, func(t int64) bool { return t > after && t <= e.Time })
			cmd := e.Details["command"]
			if cmd == "" {
				_, cmd, _ = strings.Cut(msg, ": ")
			}
			starts = append(starts, started{node: ae.node, alloc: a.ID, cmd: cmd, at: time.Unix(0, e.Time), ok: ok})
		}
	}
	s.mu.Unlock()
	for _, m := range twice {
		r.violate("%s", m)
	}

	for _, st := range starts {
		s.mu.Lock()
		s.starts++
		s.mu.Unlock()
		if !st.ok {
			r.violate("%s (alloc %s) started llamacpp at %s with no \"Fetch finished\" or \"Weights present\" of its node's store before it",
				st.node, st.alloc[:8], st.at.Format("15:04:05.000"))
		}
		if strings.Contains(st.cmd, ".incomplete") {
			r.violate("%s (alloc %s): an .incomplete path in the engine's command line: %s", st.node, st.alloc[:8], st.cmd)
		}
		path := modelArg(st.cmd)
		if path == "" || !strings.HasPrefix(path, s.stores[st.node]+"/") {
			r.violate("%s (alloc %s): the engine's model %q is not in its node's store %s", st.node, st.alloc[:8], path, s.stores[st.node])
			continue
		}
		sum, err := s.hash(path)
		switch {
		case err != nil:
			s.mu.Lock()
			gone := s.removedAfterLocked(st.node, st.at)
			if gone {
				s.unverifiable++
			}
			s.mu.Unlock()
			if !gone {
				r.violate("%s (alloc %s): the engine's model %s: %v", st.node, st.alloc[:8], path, err)
			}
		case sum != s.sha:
			r.violate("%s (alloc %s): the engine's model %s has sha256 %s, the hub's is %s", st.node, st.alloc[:8], path, sum, s.sha)
		}
	}
}

// storeRecord is the part of a store's record of a model the test reads.
type storeRecord struct {
	Dir       string    `json:"dir"`
	FetchedAt time.Time `json:"fetched_at"`
	Fetch     struct {
		Bytes int64 `json:"bytes"`
	} `json:"fetch"`
}

// sampleRecords reads every node's record of beta: a fetched_at not seen
// before, with bytes fetched, is one fetch.
func (r *chaosRun) sampleRecords() {
	s := r.store
	nodes := make([]string, 0, len(s.stores))
	for n := range s.stores {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, node := range nodes {
		b, err := os.ReadFile(s.recordPath(node))
		if err != nil {
			continue
		}
		var rec storeRecord
		if json.Unmarshal(b, &rec) != nil || rec.Fetch.Bytes <= 0 {
			continue
		}
		s.mu.Lock()
		if rec.FetchedAt.Equal(s.lastRec[node]) {
			s.mu.Unlock()
			continue
		}
		s.lastRec[node] = rec.FetchedAt
		ep := s.epochLocked(node, rec.FetchedAt)
		if s.byRecord[node] == nil {
			s.byRecord[node] = map[int]int{}
		}
		s.byRecord[node][ep]++
		n := s.byRecord[node][ep]
		s.mu.Unlock()
		if n > 1 {
			r.violate("%s fetched %s %d times without the test removing it between (its store's record: fetched_at %s, %d bytes)",
				node, chaosRepo, n, rec.FetchedAt.Format("15:04:05.000"), rec.Fetch.Bytes)
		}
	}
}

// finalStoreCheck: at the end, every store that holds beta holds it whole
// with the hub's sha256; part files left are counted.
func (r *chaosRun) finalStoreCheck() string {
	s := r.store
	var held, parts []string
	nodes := make([]string, 0, len(s.stores))
	for n := range s.stores {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, node := range nodes {
		if b, err := os.ReadFile(s.recordPath(node)); err == nil {
			var rec storeRecord
			if err := json.Unmarshal(b, &rec); err != nil {
				r.violate("%s: beta's record: %v", node, err)
			} else if sum, err := s.hash(filepath.Join(rec.Dir, chaosFile)); err != nil || sum != s.sha {
				r.violate("%s: its store holds beta (record) but %s: sha256 %s, %v; the hub's is %s", node, filepath.Join(rec.Dir, chaosFile), sum, err, s.sha)
			} else {
				held = append(held, node)
			}
		}
		ps, _ := filepath.Glob(filepath.Join(s.repoDir(node, chaosRepo), "blobs", "*.incomplete"))
		for _, p := range ps {
			fi, err := os.Stat(p)
			if err == nil {
				parts = append(parts, fmt.Sprintf("%s %d bytes", node, fi.Size()))
			}
		}
	}
	return fmt.Sprintf("stores holding beta whole at the end (sha256 checked): %s; part files left: %s",
		orNone(held), orNone(parts))
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

// storeSummary is the report's lines on the store.
func (r *chaosRun) storeSummary() string {
	s := r.store
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	perNode := map[string]int{}
	for _, f := range s.fetches {
		perNode[f.node]++
	}
	var nodes []string
	for n := range s.stores {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	var counts []string
	for _, n := range nodes {
		most := 0
		for _, c := range s.byEvents[n] {
			most = max(most, c)
		}
		mostRec := 0
		for _, c := range s.byRecord[n] {
			mostRec = max(mostRec, c)
		}
		counts = append(counts, fmt.Sprintf("%s %d fetches, %d removals by the test, most in one epoch %d (events) / %d (records)",
			n, perNode[n], len(s.removed[n]), most, mostRec))
	}
	var moved int64
	for _, f := range s.fetches {
		moved += max(f.bytes, 0)
	}
	st := s.hub.Stats(chaosRepo, chaosFile)
	fmt.Fprintf(&b, "weights: %d engine starts of beta checked (%d whose file the test had removed before it was hashed); whole fetches of %s: %d; per node: %s\n",
		s.starts, s.unverifiable, chaosRepo, len(s.fetches), strings.Join(counts, "; "))
	fmt.Fprintf(&b, "hub: %d GETs of %s (%d from a byte > 0: resumes), %d body bytes (the file is %d; the whole fetches' events say %d fetched); fetch failures seen in task events: %d\n",
		st.Gets, chaosFile, countResumes(st.RangeStarts), st.BodyBytes, s.size, moved, len(s.failures))
	return b.String()
}

func countResumes(starts []int64) int {
	n := 0
	for _, s := range starts {
		if s > 0 {
			n++
		}
	}
	return n
}

// betaByNode counts, per node, beta's allocations that run or are to run.
func betaByNode(v fleetView) map[string]int {
	out := map[string]int{}
	for _, a := range v.allocs {
		if isBetaJob(a.JobID) && a.DesiredStatus == api.AllocDesiredStatusRun &&
			(a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusPending) {
			out[a.NodeName]++
		}
	}
	return out
}

func (r *chaosRun) isDown(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down[name] || r.died[name]
}

// pickFetchTarget picks a node to kill whose beta replicas the planner's
// rack spread must re-place onto nodes that run no beta. A failed replica
// does not count for spread while it is placed again (reconcile's
// countRunning, facility's NotServing), so the first one goes to the racks
// that hold the fewest beta replicas once the killed node's are left out:
// the node qualifies when the live nodes of those racks, itself left out,
// run no beta. It returns the node and those nodes (the targets), or why
// none.
func (r *chaosRun) pickFetchTarget() (*localnomad.Agent, []string, string) {
	v, err := r.read()
	if err != nil {
		return nil, nil, err.Error()
	}
	beta := betaByNode(v)
	type choice struct {
		kill    *localnomad.Agent
		targets []string
	}
	var good []choice
	for _, m := range r.c.Clients {
		if beta[m.Name] == 0 || r.isDown(m.Name) {
			continue
		}
		racks := map[string]int{}
		for _, rk := range chaosRack {
			racks[rk] += 0
		}
		for n, k := range beta {
			if n != m.Name {
				racks[chaosRack[n]] += k
			}
		}
		least := -1
		for _, k := range racks {
			if least < 0 || k < least {
				least = k
			}
		}
		var targets []string
		ok := true
		for _, n := range r.c.Clients {
			if n.Name == m.Name || r.isDown(n.Name) || racks[chaosRack[n.Name]] != least {
				continue
			}
			if beta[n.Name] > 0 {
				ok = false
			}
			targets = append(targets, n.Name)
		}
		if ok && len(targets) > 0 {
			good = append(good, choice{m, targets})
		}
	}
	if len(good) == 0 {
		return nil, nil, fmt.Sprintf("no node whose beta replicas the rack spread would move onto nodes without beta (beta by node: %v)", beta)
	}
	c := good[r.rng.IntN(len(good))]
	return c.kill, c.targets, ""
}

// storeFault is a store fault's arming, how it is seen to hit, and how it
// is cleared.
type storeFault struct {
	arm   func() error
	hit   func() (bool, string)
	clear func()
	hold  bool // held a while after it hit, then cleared
}

// injectStore carries out one of chaosStoreKinds: it removes beta from
// the target nodes' stores, arms the fault, kills the node pickFetchTarget
// chose (as node-kill does), waits for the forced fetch to meet the fault,
// holds it a while where it lasts, clears it, waits for the fleet to heal
// around the dead node and brings the node back. It reports false when no
// node fits (nothing done).
func (r *chaosRun) injectStore(f *chaosFault) bool {
	s := r.store
	kill, targets, why := r.pickFetchTarget()
	if kill == nil {
		r.t.Logf("%s skipped: %s", f.kind, why)
		return false
	}
	for _, n := range targets {
		if err := s.removeBeta(n); err != nil {
			r.t.Logf("%s skipped: %v", f.kind, err)
			return false
		}
	}
	half := s.size / 2
	placed := r.betaPlacement()
	before := s.hub.Stats(chaosRepo, chaosFile)
	newGet := func() bool { return s.hub.Stats(chaosRepo, chaosFile).Gets > before.Gets }
	var sf storeFault
	var what string
	switch f.kind {
	case "fetch-cut":
		what = fmt.Sprintf("the hub cuts the next GET of %s after %d of %d bytes", chaosFile, half, s.size)
		sf = storeFault{
			arm: func() error { s.hub.Cut(chaosRepo, chaosFile, half, 1); return nil },
			hit: func() (bool, string) { return newGet(), "cut" },
		}
	case "hub-stall":
		var release func()
		what = fmt.Sprintf("the hub stalls the next GET of %s after %d of %d bytes", chaosFile, half, s.size)
		sf = storeFault{
			arm:   func() error { release = s.hub.Stall(chaosRepo, chaosFile, half, 0, 1); return nil },
			hit:   func() (bool, string) { return newGet(), "stalled" },
			clear: func() { release() },
			hold:  true,
		}
	case "hub-503", "hub-404":
		// Cut halfway, then every request for the file refused (the
		// fetch's resume first) until cleared.
		status := 503
		if f.kind == "hub-404" {
			status = 404
		}
		what = fmt.Sprintf("the hub cuts the next GET of %s after %d of %d bytes, then answers every request for it %d", chaosFile, half, s.size, status)
		refusedFrom := -1
		sf = storeFault{
			arm: func() error { s.hub.Cut(chaosRepo, chaosFile, half, 1); return nil },
			hit: func() (bool, string) {
				if refusedFrom < 0 {
					if newGet() {
						s.hub.Refuse(chaosRepo, chaosFile, status, 0)
						refusedFrom = s.hub.Requests()
					}
					return false, ""
				}
				return s.hub.Requests() > refusedFrom, fmt.Sprintf("cut, then refused %d", status)
			},
			hold: true,
		}
	case "store-full":
		what = fmt.Sprintf("%s of %s in use in the store (store_budget_bytes %d: room for one model)", chaosFillerRepo, formatMiB(s.size), s.budget)
		sf = storeFault{
			arm: func() error {
				for _, n := range targets {
					if err := s.fill(r.t.Context(), n); err != nil {
						return fmt.Errorf("%s: %w", n, err)
					}
				}
				return nil
			},
			hit: func() (bool, string) {
				for _, e := range r.storeFailuresSince(f.injected) {
					if slices.Contains(targets, e.node) && strings.Contains(e.msg, "budget") {
						return true, "refused by the store"
					}
				}
				return false, ""
			},
			clear: func() {
				for _, n := range targets {
					if err := s.unfill(n); err != nil {
						r.violate("store-full: dropping the filler's lease on %s: %v", n, err)
					}
				}
			},
			hold: true,
		}
	}
	if sf.clear == nil {
		sf.clear = s.hub.ClearFaults
	}
	if err := sf.arm(); err != nil {
		sf.clear()
		r.t.Logf("%s skipped: %v", f.kind, err)
		return false
	}
	r.setDown(kill.Name, true)
	killed := kill.Kill()
	f.detail = fmt.Sprintf("%s; beta removed from the stores of %s, then kill -9 of %s and %d processes so that the rack spread re-places its beta replicas there (beta by node: %s)",
		what, strings.Join(targets, " and "), kill.Name, len(killed), placed)

	// The forced fetch meets the fault (or the fleet heals without one).
	deadline := time.Now().Add(*chaosBound)
	hit, missed := "", false
	var hitAt time.Time
	for hit == "" && !missed {
		if ok, what := sf.hit(); ok {
			hit, hitAt = what, time.Now()
			break
		}
		if ok, _ := r.allServingWithout(kill.Name); ok || time.Now().After(deadline) {
			missed = true
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if hit != "" && sf.hold {
		r.hold(10*time.Second, 40*time.Second)
	}
	sf.clear()
	s.hub.ClearFaults()
	f.cleared = time.Now()
	r.healAround(f, kill)

	after := s.hub.Stats(chaosRepo, chaosFile)
	since := after.RangeStarts[min(len(before.RangeStarts), len(after.RangeStarts)):]
	if hit != "" && f.kind != "hub-stall" && f.kind != "store-full" && !slices.ContainsFunc(since, func(b int64) bool { return b > 0 }) {
		r.violate("%s (%s): the fetch cut at byte %d did not resume (GETs from bytes %v)", f.kind, f.detail, half, since)
	}
	var outcome []string
	if missed {
		f.missed = true
		outcome = append(outcome, "MISSED: no fetch met the fault")
	} else {
		outcome = append(outcome, fmt.Sprintf("%s %.1f s after the kill, cleared %.1f s later", hit, hitAt.Sub(f.injected).Seconds(), f.cleared.Sub(hitAt).Seconds()))
	}
	outcome = append(outcome, fmt.Sprintf("hub GETs since from bytes %v", since))
	// The first failure the fault caused says enough.
	mark := map[string]string{"fetch-cut": "cut after", "hub-503": ": 503 ", "hub-404": ": 404 ", "store-full": "budget"}[f.kind]
	for _, e := range r.storeFailuresSince(f.injected) {
		if mark != "" && strings.Contains(e.msg, mark) {
			outcome = append(outcome, fmt.Sprintf("%s: %s", e.node, clip(e.msg, 200)))
			break
		}
	}
	for _, e := range r.storeFetchesSince(f.injected) {
		outcome = append(outcome, fmt.Sprintf("%s: %s", e.node, e.msg))
	}
	outcome = append(outcome, "beta by node after: "+r.betaPlacement())
	f.detail += "; " + strings.Join(outcome, "; ")
	return true
}

// betaPlacement says where beta's allocations run, by node.
func (r *chaosRun) betaPlacement() string {
	v, err := r.read()
	if err != nil {
		return err.Error()
	}
	by := betaByNode(v)
	var out []string
	for _, n := range slices.Sorted(maps.Keys(by)) {
		out = append(out, fmt.Sprintf("%s %d", n, by[n]))
	}
	return strings.Join(out, ", ")
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func formatMiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func (r *chaosRun) storeFailuresSince(t time.Time) []chaosStoreEvent {
	return r.storeEventsSince(t, func() []chaosStoreEvent { return r.store.failures })
}

func (r *chaosRun) storeFetchesSince(t time.Time) []chaosStoreEvent {
	return r.storeEventsSince(t, func() []chaosStoreEvent { return r.store.fetches })
}

// storeEventsSince reads the nodes' stores once more, then returns the
// events of list (read under the store's lock) from t on, oldest first.
func (r *chaosRun) storeEventsSince(t time.Time, list func() []chaosStoreEvent) []chaosStoreEvent {
	v, err := r.read()
	if err == nil {
		r.checkStore(v)
	}
	r.store.mu.Lock()
	defer r.store.mu.Unlock()
	var out []chaosStoreEvent
	for _, e := range list() {
		if !e.at.Before(t) {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// healAround waits, up to -chaos.bound, for every replica to serve with
// none on the dead node a, then brings a back.
func (r *chaosRun) healAround(f *chaosFault, a *localnomad.Agent) {
	healed := time.Now().Add(*chaosBound)
	ok, why := false, ""
	for !ok && time.Now().Before(healed) {
		if ok, why = r.allServingWithout(a.Name); !ok {
			time.Sleep(500 * time.Millisecond)
		}
	}
	if !ok {
		r.violate("%s (%s): the fleet did not heal around the dead node in %s: %s", f.kind, f.detail, *chaosBound, why)
	}
	if err := a.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.setDown(a.Name, false)
	r.c.WaitReady(2 * time.Minute)
}
