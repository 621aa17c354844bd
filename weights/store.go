package weights

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"

	"github.com/llmgw/llmgw/internal/atomicfile"
	"github.com/llmgw/llmgw/weightsapi"
)

// Config is a node's model store.
type Config struct {
	// Dir is the store's root. Hub models live in Hugging Face's cache
	// layout under Dir/hub (so an engine with HF_HOME=Dir finds them), URL
	// models under Dir/urls/<key>; llmgw's records under Dir/.llmgw.
	Dir string
	// HubURL is the hub (or mirror) base URL; DefaultHubURL when empty.
	HubURL string
	// BudgetBytes bounds what the store holds; 0: only the disk does.
	// Models no replica uses are evicted, least recently used first, to
	// make room.
	BudgetBytes int64
	// MaxConcurrent fetches run at once on the node, across processes
	// (default 2); the others wait for a slot.
	MaxConcurrent int
	// BytesPerSecond bounds the node's fetching; each of the
	// MaxConcurrent slots gets its share. 0: no bound.
	BytesPerSecond int64
	// Transport for the fetches (tests); http.DefaultTransport when nil.
	Transport http.RoundTripper
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
	// RetryWait is how long a transient failure waits before the next try
	// (doubled each time, four tries in all); 1 s when zero.
	RetryWait time.Duration
	// StallTimeout ends a request that gets no answer's headers, or no
	// byte of its body, for this long (a hub or proxy that holds the
	// connection): the try fails and the next resumes. 2 min when zero.
	StallTimeout time.Duration
}

// Store is a node's model store: each model fetched once, shared by every
// replica on the node, visible only when whole and verified.
type Store struct {
	cfg Config
}

// Model is a model the store holds whole: its record in Dir/.llmgw/models.
type Model struct {
	Key    string `json:"key"`
	Source string `json:"source"`
	// Hub models: the repository, the revision asked and the commit it
	// named when fetched.
	Repo     string `json:"repo,omitempty"`
	Revision string `json:"revision,omitempty"`
	Commit   string `json:"commit,omitempty"`
	// Dir is the directory holding the files (a hub snapshot, or a URL
	// model's directory).
	Dir       string    `json:"dir"`
	Files     []File    `json:"files"`
	Bytes     int64     `json:"bytes"`
	FetchedAt time.Time `json:"fetched_at"`
	UsedAt    time.Time `json:"used_at"`
	// Fetch says what the fetch that made it moved.
	Fetch FetchStats `json:"fetch"`
}

// FetchStats is what one Ensure moved over the network.
type FetchStats struct {
	// Bytes transferred (0: the model was there already).
	Bytes int64 `json:"bytes"`
	// Resumed counts the bytes found from an earlier, cut fetch and kept.
	Resumed int64   `json:"resumed,omitempty"`
	Seconds float64 `json:"seconds"`
}

// Event is a step of a fetch, for the task's events.
type Event struct {
	Message     string
	Annotations map[string]string
}

// Open opens (creating) the store at cfg.Dir.
func Open(cfg Config) (*Store, error) {
	if cfg.Dir == "" || !filepath.IsAbs(cfg.Dir) {
		return nil, fmt.Errorf("model store: dir %q is not an absolute path", cfg.Dir)
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = 2
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RetryWait <= 0 {
		cfg.RetryWait = time.Second
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = 2 * time.Minute
	}
	for _, d := range []string{"hub", "urls", ".llmgw/models", ".llmgw/locks", ".llmgw/leases", ".llmgw/fetching"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("model store: %w", err)
		}
	}
	return &Store{cfg: cfg}, nil
}

// Dir is the store's root.
func (s *Store) Dir() string { return s.cfg.Dir }

func (s *Store) recordPath(key string) string {
	return filepath.Join(s.cfg.Dir, ".llmgw", "models", key+".json")
}

// Lookup returns the model key names if the store holds it whole.
func (s *Store) Lookup(key string) (Model, bool, error) {
	var m Model
	b, err := os.ReadFile(s.recordPath(key))
	if errors.Is(err, os.ErrNotExist) {
		return m, false, nil
	}
	if err != nil {
		return m, false, fmt.Errorf("model store: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, false, fmt.Errorf("model store: record %s: %w", key, err)
	}
	return m, s.whole(m), nil
}

// whole checks that every file of m is still there at its size.
func (s *Store) whole(m Model) bool {
	for _, f := range m.Files {
		fi, err := os.Stat(filepath.Join(m.Dir, f.Name))
		if err != nil || !fi.Mode().IsRegular() || (f.Size >= 0 && fi.Size() != f.Size) {
			return false
		}
	}
	return true
}

// Models lists the models the store holds whole, by key.
func (s *Store) Models() ([]Model, error) {
	ents, err := os.ReadDir(filepath.Join(s.cfg.Dir, ".llmgw", "models"))
	if err != nil {
		return nil, fmt.Errorf("model store: %w", err)
	}
	var out []Model
	for _, e := range ents {
		key, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(key, ".") {
			continue
		}
		if m, ok, err := s.Lookup(key); err == nil && ok {
			out = append(out, m)
		}
	}
	return out, nil
}

// Ensure makes the store hold the weights src names, fetching what is
// missing once for the node, and returns the model. token is the bearer
// token for a gated hub repository ("" for none); events hears each step.
// A path source is only checked: nothing is fetched.
func (s *Store) Ensure(ctx context.Context, src Source, token string, events func(Event)) (Model, error) {
	if events == nil {
		events = func(Event) {}
	}
	if err := src.Validate(); err != nil {
		return Model{}, err
	}
	if src.Path != "" {
		if _, err := os.Stat(src.Path); err != nil {
			return Model{}, fmt.Errorf("weights.path: %w", err)
		}
		return Model{Source: src.String(), Dir: src.Path}, nil
	}
	key := src.Key()
	// The model's lock is held from here on, so that no eviction takes
	// it while it is handed out (evict skips a model whose lock is held).
	unlock, err := s.lock(ctx, "model-"+key, func() {
		events(Event{Message: fmt.Sprintf("Waiting: another task on this node is fetching %s", src)})
	})
	if err != nil {
		return Model{}, err
	}
	defer unlock()
	if m, ok, err := s.Lookup(key); err != nil || ok {
		if ok {
			s.touch(&m)
			m.Fetch = FetchStats{}
			events(Event{Message: fmt.Sprintf("Weights present: %s (%s), nothing fetched", src, formatBytes(m.Bytes)),
				Annotations: map[string]string{"key": key, "fetched_bytes": "0"}})
		}
		return m, err
	}

	c := newClient(s.cfg.HubURL, token, s.cfg.Transport, s.cfg.StallTimeout)
	var r resolved
	err = s.retry(ctx, events, "resolve "+src.String(), func() error {
		var err error
		if src.Hub != nil {
			r, err = c.resolveHub(ctx, *src.Hub)
		} else {
			r, err = c.resolveURLs(ctx, src.URLs)
		}
		return err
	})
	if err != nil {
		return Model{}, fmt.Errorf("weights %s: %w", src, err)
	}

	m := Model{Key: key, Source: src.String(), Files: r.Files}
	var partDir string
	if src.Hub != nil {
		m.Repo, m.Revision, m.Commit = src.Hub.Repo, src.Hub.Rev(), r.Commit
		repoDir := filepath.Join(s.cfg.Dir, "hub", "models--"+strings.ReplaceAll(src.Hub.Repo, "/", "--"))
		m.Dir = filepath.Join(repoDir, "snapshots", r.Commit)
		partDir = filepath.Join(repoDir, "blobs")
	} else {
		m.Dir = filepath.Join(s.cfg.Dir, "urls", key)
		partDir = filepath.Join(s.cfg.Dir, "urls", "."+key+".incomplete")
	}
	for _, f := range m.Files {
		if f.Size > 0 {
			m.Bytes += f.Size
		}
	}
	if err := os.MkdirAll(partDir, 0o755); err != nil {
		return Model{}, fmt.Errorf("model store: %w", err)
	}

	if err := s.reserve(ctx, m, partDir, events); err != nil {
		return Model{}, err
	}
	defer func() { _ = os.Remove(s.reservationPath(key)) }()

	release, err := s.slot(ctx, events, src)
	if err != nil {
		return Model{}, err
	}
	defer release()

	start := s.cfg.Now()
	var limiter *rate.Limiter
	if s.cfg.BytesPerSecond > 0 {
		per := max(s.cfg.BytesPerSecond/int64(s.cfg.MaxConcurrent), 1)
		limiter = rate.NewLimiter(rate.Limit(per), int(min(per, chunk)))
	}
	events(Event{Message: fmt.Sprintf("Fetch started: %s, %d files, %s", src, len(m.Files), formatBytes(m.Bytes)),
		Annotations: map[string]string{"key": key, "bytes": fmt.Sprint(m.Bytes), "commit": m.Commit}})
	blobs := make([]string, len(m.Files))
	for i := range m.Files {
		f := &m.Files[i]
		part := filepath.Join(partDir, partName(key, *f))
		var got fileResult
		tries := 0
		err := s.retry(ctx, events, "fetch "+f.Name, func() error {
			var err error
			got, err = c.download(ctx, *f, part, limiter, s.cfg.Now, s.cfg.StallTimeout, func(done, total int64, rate float64) {
				events(Event{Message: fmt.Sprintf("Fetching %s: %s of %s, %s/s", f.Name, formatBytes(done), formatBytes(total), formatBytes(int64(rate))),
					Annotations: map[string]string{"key": key, "file": f.Name, "bytes_done": fmt.Sprint(done)}})
			})
			// Every try's bytes moved count; only what the first found
			// kept came from an earlier fetch (a later try's are this
			// one's own).
			m.Fetch.Bytes += got.transferred
			if tries == 0 {
				m.Fetch.Resumed += got.resumed
			}
			tries++
			if errors.Is(err, syscall.ENOSPC) {
				return permanent{fmt.Errorf("the node's disk is full (model store %s): %w", s.cfg.Dir, err)}
			}
			return err
		})
		if err != nil {
			return Model{}, fmt.Errorf("weights %s: %s: %w", src, f.Name, err)
		}
		if f.Size < 0 {
			f.Size = got.size
			m.Bytes += got.size
		}
		if f.SHA256 == "" {
			f.SHA256 = got.sha256
		}
		blobs[i] = part
	}
	if err := s.publish(&m, partDir, blobs); err != nil {
		return Model{}, err
	}
	m.Fetch.Seconds = s.cfg.Now().Sub(start).Seconds()
	m.FetchedAt = s.cfg.Now()
	m.UsedAt = m.FetchedAt
	if err := atomicfile.WriteJSON(s.recordPath(key), m); err != nil {
		return Model{}, fmt.Errorf("model store: %w", err)
	}
	rateS := 0.0
	if m.Fetch.Seconds > 0 {
		rateS = float64(m.Fetch.Bytes) / m.Fetch.Seconds
	}
	events(Event{Message: fmt.Sprintf("Fetch finished: %s, %s fetched in %.1f s (%s/s)%s", src, formatBytes(m.Fetch.Bytes),
		m.Fetch.Seconds, formatBytes(int64(rateS)), resumedNote(m.Fetch.Resumed)),
		Annotations: map[string]string{"key": key, "fetched_bytes": fmt.Sprint(m.Fetch.Bytes), "seconds": fmt.Sprintf("%.3f", m.Fetch.Seconds)}})
	return m, nil
}

func resumedNote(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", resumed: %s kept from an unfinished fetch", formatBytes(n))
}

// partName is where a file is fetched to before it is whole: one name per
// model and file, so a fetch cut by anything resumes where it stopped.
func partName(key string, f File) string {
	if f.SHA256 != "" {
		return f.SHA256 + ".incomplete"
	}
	return "." + key + "-" + weightsapi.Sanitize(f.Name) + ".incomplete"
}

// publish makes a whole, verified model visible: hub files move into the
// blobs by sha256 and the snapshot links to them, the revision's ref last;
// a URL model's directory is renamed into place at once.
//
// Files of one model with the same bytes (the same sha256) were fetched
// into one part: it moves once, and the later files are hard links to the
// first (URLs) or link to the one blob (hub).
func (s *Store) publish(m *Model, partDir string, parts []string) error {
	moved := map[string]string{} // part → where it went
	if m.Commit == "" {
		if err := os.RemoveAll(m.Dir); err != nil {
			return fmt.Errorf("model store: %w", err)
		}
		for i, f := range m.Files {
			dst := filepath.Join(partDir, f.Name)
			var err error
			if first, ok := moved[parts[i]]; ok {
				err = os.Link(first, dst)
			} else {
				err = os.Rename(parts[i], dst)
				moved[parts[i]] = dst
			}
			if err != nil {
				return fmt.Errorf("model store: %w", err)
			}
		}
		if err := os.Rename(partDir, m.Dir); err != nil {
			return fmt.Errorf("model store: %w", err)
		}
		syncDir(filepath.Dir(m.Dir))
		return nil
	}
	for i, f := range m.Files {
		blob := filepath.Join(partDir, f.SHA256)
		if _, ok := moved[parts[i]]; !ok {
			if err := os.Rename(parts[i], blob); err != nil {
				return fmt.Errorf("model store: %w", err)
			}
			moved[parts[i]] = blob
		}
		link := filepath.Join(m.Dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return fmt.Errorf("model store: %w", err)
		}
		rel, err := filepath.Rel(filepath.Dir(link), blob)
		if err != nil {
			return fmt.Errorf("model store: %w", err)
		}
		tmp := link + ".llmgw-tmp"
		_ = os.Remove(tmp)
		if err := os.Symlink(rel, tmp); err != nil {
			return fmt.Errorf("model store: %w", err)
		}
		if err := os.Rename(tmp, link); err != nil {
			return fmt.Errorf("model store: %w", err)
		}
	}
	syncDir(partDir)
	syncDir(m.Dir)
	if m.Revision != m.Commit {
		refs := filepath.Join(filepath.Dir(filepath.Dir(m.Dir)), "refs", filepath.FromSlash(m.Revision))
		if err := os.MkdirAll(filepath.Dir(refs), 0o755); err != nil {
			return fmt.Errorf("model store: %w", err)
		}
		tmp := refs + ".llmgw-tmp"
		if err := os.WriteFile(tmp, []byte(m.Commit), 0o644); err != nil { //nolint:gosec // the ref is public: engines read it
			return fmt.Errorf("model store: %w", err)
		}
		if err := os.Rename(tmp, refs); err != nil {
			return fmt.Errorf("model store: %w", err)
		}
	}
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}

// touch marks m used now (least recently used models are evicted first).
func (s *Store) touch(m *Model) {
	m.UsedAt = s.cfg.Now()
	_ = atomicfile.WriteJSON(s.recordPath(m.Key), *m)
}

// permanent marks an error that trying again cannot help.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// retry runs f up to four times while it fails for a reason that may pass
// (a cut connection, a 5xx, a file whose hash differed), waiting RetryWait,
// then twice that, and so on.
func (s *Store) retry(ctx context.Context, events func(Event), what string, f func() error) error {
	wait := s.cfg.RetryWait
	var err error
	for try := 1; ; try++ {
		err = f()
		if err == nil {
			return nil
		}
		var he *HTTPError
		var p permanent
		if try == 4 || ctx.Err() != nil || errors.As(err, &p) || (errors.As(err, &he) && he.Permanent()) {
			return err
		}
		events(Event{Message: fmt.Sprintf("Fetch retry: %s failed (%v); try %d of 4 in %s", what, err, try+1, wait)})
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait *= 2
	}
}

// lock takes the node-wide lock name (an flock on a file in the store, so
// it holds across processes: every task's fetch, and a restarted plugin),
// telling waiting once if it must wait.
func (s *Store) lock(ctx context.Context, name string, waiting func()) (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.cfg.Dir, ".llmgw", "locks", name), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("model store: %w", err)
	}
	told := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("model store: lock %s: %w", name, err)
		}
		if !told && waiting != nil {
			waiting()
			told = true
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// held reports whether another process (or open file) holds lock name.
func (s *Store) held(name string) bool {
	f, err := os.OpenFile(filepath.Join(s.cfg.Dir, ".llmgw", "locks", name), os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return true
	}
	return false
}

// slot takes one of the node's MaxConcurrent fetch slots.
func (s *Store) slot(ctx context.Context, events func(Event), src Source) (func(), error) {
	told := false
	for {
		for i := range s.cfg.MaxConcurrent {
			f, err := os.OpenFile(filepath.Join(s.cfg.Dir, ".llmgw", "locks", fmt.Sprintf("slot-%d", i)), os.O_CREATE|os.O_RDWR, 0o600)
			if err != nil {
				return nil, fmt.Errorf("model store: %w", err)
			}
			if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
				return func() { _ = f.Close() }, nil
			}
			_ = f.Close()
		}
		if !told {
			events(Event{Message: fmt.Sprintf("Waiting: %d fetches already run on this node (max_concurrent_fetches); %s waits for one to end", s.cfg.MaxConcurrent, src)})
			told = true
		}
		t := time.NewTimer(500 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%d B", n)
	}
}

// sortByUse orders models least recently used first.
func sortByUse(ms []Model) {
	slices.SortFunc(ms, func(a, b Model) int { return a.UsedAt.Compare(b.UsedAt) })
}
