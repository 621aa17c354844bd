package weights_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/testing/hubserver"
	"github.com/llmgw/llmgw/internal/testing/wait"
	"github.com/llmgw/llmgw/weights"
)

const repo = "llmgw/tiny"

// model is a file of n bytes that differ from those of any other seed.
func model(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func open(t *testing.T, hub *hubserver.Server, budget int64) *weights.Store {
	t.Helper()
	s, err := weights.Open(weights.Config{Dir: t.TempDir(), HubURL: hub.URL(), BudgetBytes: budget, RetryWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) add(ev weights.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev.Message)
}

func (e *events) text() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.got, "\n")
}

func hubSource(files ...string) weights.Source {
	return weights.Source{Hub: &weights.Hub{Repo: repo, Revision: "main", Files: files}}
}

// A model is fetched once into Hugging Face's cache layout, verified, and
// published with its ref; asking again fetches nothing.
func TestFetchOnceIntoTheHubLayout(t *testing.T) {
	hub := hubserver.Start(t, hubserver.Options{})
	data := model(3<<20, 1)
	commit := hub.Add(repo, "main", map[string][]byte{"tiny.gguf": data, "config/extra.json": []byte(`{"a":1}`)})
	s := open(t, hub, 0)
	var ev events
	m, err := s.Ensure(t.Context(), hubSource("tiny.gguf", "config/extra.json"), "", ev.add)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(s.Dir(), "hub", "models--llmgw--tiny", "snapshots", commit)
	if m.Dir != want || m.Commit != commit || m.Bytes != int64(len(data))+7 {
		t.Errorf("model %+v, want dir %s commit %s", m, want, commit)
	}
	got, err := os.ReadFile(filepath.Join(m.Dir, "tiny.gguf"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("snapshot file: %v (%d bytes)", err, len(got))
	}
	if fi, err := os.Lstat(filepath.Join(m.Dir, "tiny.gguf")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("snapshot file is not a link to a blob: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "hub", "models--llmgw--tiny", "blobs", hexSum(data))); err != nil {
		t.Errorf("blob by sha256: %v", err)
	}
	if ref, _ := os.ReadFile(filepath.Join(s.Dir(), "hub", "models--llmgw--tiny", "refs", "main")); string(ref) != commit {
		t.Errorf("refs/main %q, want %s", ref, commit)
	}
	if m.Fetch.Bytes != int64(len(data))+7 {
		t.Errorf("fetched %d bytes", m.Fetch.Bytes)
	}
	if !strings.Contains(ev.text(), "Fetch finished") {
		t.Errorf("events:\n%s", ev.text())
	}

	var again events
	m2, err := s.Ensure(t.Context(), hubSource("tiny.gguf", "config/extra.json"), "", again.add)
	if err != nil {
		t.Fatal(err)
	}
	if m2.Fetch.Bytes != 0 || !strings.Contains(again.text(), "nothing fetched") {
		t.Errorf("second ensure fetched %d bytes; events:\n%s", m2.Fetch.Bytes, again.text())
	}
	if st := hub.Stats(repo, "tiny.gguf"); st.Gets != 1 {
		t.Errorf("the file was fetched %d times, want once", st.Gets)
	}
	ms, err := s.Models()
	if err != nil || len(ms) != 1 || ms[0].Key != hubSource("tiny.gguf", "config/extra.json").Key() {
		t.Errorf("models %+v, %v", ms, err)
	}
}

// A fetch cut halfway resumes from the bytes kept, and nothing is visible
// before the whole model is.
func TestCutFetchResumes(t *testing.T) {
	hub := hubserver.Start(t, hubserver.Options{})
	data := model(4<<20, 2)
	hub.Add(repo, "main", map[string][]byte{"tiny.gguf": data})
	hub.Cut(repo, "tiny.gguf", 1<<20, 1)
	s := open(t, hub, 0)
	var ev events
	m, err := s.Ensure(t.Context(), hubSource("tiny.gguf"), "", ev.add)
	if err != nil {
		t.Fatal(err)
	}
	st := hub.Stats(repo, "tiny.gguf")
	if st.Gets != 2 || len(st.RangeStarts) != 2 || st.RangeStarts[0] != 0 || st.RangeStarts[1] < 1<<19 {
		t.Errorf("gets %d from %v, want two, the second from where the first was cut", st.Gets, st.RangeStarts)
	}
	// Both tries' bytes count, and nothing came from an earlier fetch.
	if m.Fetch.Resumed != 0 || m.Fetch.Bytes != st.BodyBytes || st.BodyBytes != int64(len(data)) {
		t.Errorf("fetch %+v; the hub sent %d bytes of %d", m.Fetch, st.BodyBytes, len(data))
	}
	if got, _ := os.ReadFile(filepath.Join(m.Dir, "tiny.gguf")); !bytes.Equal(got, data) {
		t.Error("the resumed file differs from the source")
	}
	if !strings.Contains(ev.text(), "Fetch retry") || strings.Contains(ev.text(), "kept from an unfinished fetch") {
		t.Errorf("events:\n%s", ev.text())
	}
}

// A process killed mid-fetch leaves only an .incomplete part: no record,
// no snapshot, no ref; the next Ensure resumes from it.
func TestKilledFetchLeavesNothingVisible(t *testing.T) {
	hub := hubserver.Start(t, hubserver.Options{})
	data := model(8<<20, 3)
	hub.Add(repo, "main", map[string][]byte{"tiny.gguf": data})
	// Every try is cut after 1 MiB: four tries leave 4 MiB of 8, as a
	// fetch killed halfway would.
	hub.Cut(repo, "tiny.gguf", 1<<20, 4)
	s := open(t, hub, 0)
	if _, err := s.Ensure(t.Context(), hubSource("tiny.gguf"), "", nil); err == nil {
		t.Fatal("a fetch cut four times succeeded")
	}
	if _, ok, _ := s.Lookup(hubSource("tiny.gguf").Key()); ok {
		t.Error("the store says it holds a model it never fetched whole")
	}
	repoDir := filepath.Join(s.Dir(), "hub", "models--llmgw--tiny")
	for _, p := range []string{"snapshots", "refs"} {
		if _, err := os.Stat(filepath.Join(repoDir, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists after a failed fetch: %v", p, err)
		}
	}
	part := filepath.Join(repoDir, "blobs", hexSum(data)+".incomplete")
	if fi, err := os.Stat(part); err != nil || fi.Size() != 4<<20 {
		t.Fatalf("part: %v", err)
	}
	hub.ClearFaults()
	m, err := s.Ensure(t.Context(), hubSource("tiny.gguf"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Fetch.Resumed != 4<<20 || m.Fetch.Bytes != 4<<20 {
		t.Errorf("fetch %+v, want 4 MiB resumed and 4 MiB fetched", m.Fetch)
	}
}

// A file whose bytes differ from its sha256 is refused, named, removed and
// fetched again.
func TestCorruptFileRefusedAndFetchedAgain(t *testing.T) {
	hub := hubserver.Start(t, hubserver.Options{})
	data := model(1<<20, 4)
	hub.Add(repo, "main", map[string][]byte{"tiny.gguf": data})
	hub.Corrupt(repo, "tiny.gguf", 1)
	s := open(t, hub, 0)
	var ev events
	m, err := s.Ensure(t.Context(), hubSource("tiny.gguf"), "", ev.add)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(m.Dir, "tiny.gguf")); !bytes.Equal(got, data) {
		t.Error("the corrupt bytes were kept")
	}
	if !strings.Contains(ev.text(), "tiny.gguf: sha256") || !strings.Contains(ev.text(), "want "+hexSum(data)) {
		t.Errorf("events do not name the file and its sha256:\n%s", ev.text())
	}
	if st := hub.Stats(repo, "tiny.gguf"); st.Gets != 2 || st.RangeStarts[1] != 0 {
		t.Errorf("gets %d from %v, want the second from byte 0", st.Gets, st.RangeStarts)
	}
}

// What a hub refuses is an error naming why, tried once: an unknown
// repository, revision or file; a gated repository without its token.
func TestRefusalsAreNamed(t *testing.T) {
	hub := hubserver.Start(t, hubserver.Options{})
	hub.Add(repo, "main", map[string][]byte{"tiny.gguf": model(1000, 5)})
	hub.Add("llmgw/gated", "main", map[string][]byte{"tiny.gguf": model(1000, 6)})
	hub.Gate("llmgw/gated", "secret-token")
	s := open(t, hub, 0)
	for _, c := range []struct {
		src  weights.Source
		want string
	}{
		{weights.Source{Hub: &weights.Hub{Repo: "llmgw/none", Files: []string{"tiny.gguf"}}}, "RepoNotFound"},
		{weights.Source{Hub: &weights.Hub{Repo: repo, Revision: "v9", Files: []string{"tiny.gguf"}}}, "RevisionNotFound"},
		{hubSource("other.gguf"), "EntryNotFound"},
		{weights.Source{Hub: &weights.Hub{Repo: "llmgw/gated", Files: []string{"tiny.gguf"}}}, "needs a token"},
		{hubSource("*.safetensors"), `"*.safetensors" matches no file`},
	} {
		before := hub.Requests()
		_, err := s.Ensure(t.Context(), c.src, "", nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.src, err, c.want)
		}
		if n := hub.Requests() - before; n != 1 {
			t.Errorf("%s: %d requests, want 1 (a refusal is not retried)", c.src, n)
		}
	}
	if _, err := s.Ensure(t.Context(), weights.Source{Hub: &weights.Hub{Repo: "llmgw/gated", Files: []string{"tiny.gguf"}}}, "secret-token", nil); err != nil {
		t.Errorf("with the token: %v", err)
	}
	if ms, _ := s.Models(); len(ms) != 1 {
		t.Errorf("%d models held, want the gated one only", len(ms))
	}
}

// Patterns are matched against the hub's file list; redirects to the
// blob host are followed with the range kept.
func TestPatternsAndRedirects(t *testing.T) {
	hub := hubserver.Start(t, hubserver.Options{Redirect: true})
	a, b := model(1<<20, 7), model(2<<20, 8)
	hub.Add(repo, "main", map[string][]byte{"a.safetensors": a, "b.safetensors": b, "config.json": []byte("{}"), "README.md": []byte("x")})
	hub.Cut(repo, "b.safetensors", 1<<20, 1)
	s := open(t, hub, 0)
	m, err := s.Ensure(t.Context(), hubSource("*.safetensors", "config.json"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range m.Files {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a.safetensors", "b.safetensors", "config.json"}) {
		t.Errorf("files %v", names)
	}
	if got, _ := os.ReadFile(filepath.Join(m.Dir, "b.safetensors")); !bytes.Equal(got, b) {
		t.Error("b.safetensors differs after a resumed redirect")
	}
	if st := hub.Stats(repo, "b.safetensors"); len(st.RangeStarts) != 2 || st.RangeStarts[1] == 0 {
		t.Errorf("b.safetensors range starts %v, want a resume", st.RangeStarts)
	}
}

// Plain URLs with a sha256: checked, and the model's directory appears
// whole.
func TestURLSource(t *testing.T) {
	hub := hubserver.Start(t, hubserver.Options{})
	data := model(1<<20, 9)
	commit := hub.Add(repo, "main", map[string][]byte{"tiny.gguf": data})
	u := hub.URL() + "/" + repo + "/resolve/" + commit + "/tiny.gguf"
	s := open(t, hub, 0)
	bad := weights.Source{URLs: []weights.URL{{URL: u, SHA256: strings.Repeat("0", 64)}}}
	if _, err := s.Ensure(t.Context(), bad, "", nil); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("a wrong sha256: %v", err)
	}
	src := weights.Source{URLs: []weights.URL{{URL: u, SHA256: hexSum(data)}}}
	m, err := s.Ensure(t.Context(), src, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(m.Dir, "tiny.gguf")); !bytes.Equal(got, data) || !strings.HasPrefix(m.Dir, filepath.Join(s.Dir(), "urls")) {
		t.Errorf("model dir %s", m.Dir)
	}
}

// Files of one model with the same bytes (two PEFT adapters' identical
// configs in one repository) share their part and their blob: the model
// is published whole, every file at its name, from the hub and from URLs.
func TestFilesWithTheSameBytes(t *testing.T) {
	hub := hubserver.Start(t, hubserver.Options{})
	same := []byte(`{"r": 8}`)
	commit := hub.Add(repo, "main", map[string][]byte{"a/adapter_config.json": same, "b/adapter_config.json": same, "a/w.bin": model(4096, 3)})
	s := open(t, hub, 0)
	m, err := s.Ensure(t.Context(), hubSource("*/*"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	base := hub.URL() + "/" + repo + "/resolve/" + commit + "/"
	mu, err := s.Ensure(t.Context(), weights.Source{URLs: []weights.URL{
		{URL: base + "a/adapter_config.json", Name: "a.json", SHA256: hexSum(same)},
		{URL: base + "b/adapter_config.json", Name: "b.json", SHA256: hexSum(same)},
	}}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(m.Dir, "a", "adapter_config.json"), filepath.Join(m.Dir, "b", "adapter_config.json"),
		filepath.Join(mu.Dir, "a.json"), filepath.Join(mu.Dir, "b.json")} {
		if got, err := os.ReadFile(f); err != nil || !bytes.Equal(got, same) {
			t.Errorf("%s: %q, %v", f, got, err)
		}
	}
	// Each model fetched the bytes once, as a's.
	if a, b := hub.Stats(repo, "a/adapter_config.json"), hub.Stats(repo, "b/adapter_config.json"); a.Gets != 2 || b.Gets != 0 {
		t.Errorf("GETs: a/adapter_config.json %d, b/adapter_config.json %d; want 2 and 0 (each model fetched the bytes once)", a.Gets, b.Gets)
	}
}

// Two fetches of one model at once: one fetches, the other waits and
// fetches nothing.
func TestConcurrentEnsureFetchesOnce(t *testing.T) {
	hub := hubserver.Start(t, hubserver.Options{})
	data := model(4<<20, 10)
	hub.Add(repo, "main", map[string][]byte{"tiny.gguf": data})
	release := hub.Stall(repo, "tiny.gguf", 1<<20, time.Hour, 1)
	s := open(t, hub, 0)
	var wg sync.WaitGroup
	results := make([]weights.Model, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Go(func() { results[i], errs[i] = s.Ensure(t.Context(), hubSource("tiny.gguf"), "", nil) })
	}
	// Released once the first GET is held: the others then wait on the
	// model's lock, not on the hub.
	wait.For(t, "the first GET", func() (bool, string) {
		st := hub.Stats(repo, "tiny.gguf")
		return st.Gets > 0, fmt.Sprintf("%+v", st)
	})
	release()
	wg.Wait()
	var fetched int64
	for i := range 4 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		fetched += results[i].Fetch.Bytes
	}
	if st := hub.Stats(repo, "tiny.gguf"); st.Gets != 1 || fetched != int64(len(data)) {
		t.Errorf("%d GETs, %d bytes fetched over four ensures; want one GET of %d", st.Gets, fetched, len(data))
	}
}

// The budget evicts the least recently used model no process leases, and
// refuses, naming the budget, when every model is in use.
func TestBudgetEvictsUnusedFirst(t *testing.T) {
	hub := hubserver.Start(t, hubserver.Options{})
	hub.Add(repo, "main", map[string][]byte{"a.gguf": model(1<<20, 11), "b.gguf": model(1<<20, 12), "c.gguf": model(1<<20, 13)})
	s := open(t, hub, 5<<19) // 2.5 MiB: two models
	for _, f := range []string{"a.gguf", "b.gguf"} {
		if _, err := s.Ensure(t.Context(), hubSource(f), "", nil); err != nil {
			t.Fatal(err)
		}
	}
	// b is in use by this process; a is not.
	if err := s.Acquire(hubSource("b.gguf").Key(), "task-b", os.Getpid()); err != nil {
		t.Fatal(err)
	}
	var ev events
	if _, err := s.Ensure(t.Context(), hubSource("c.gguf"), "", ev.add); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Lookup(hubSource("a.gguf").Key()); ok {
		t.Error("a (unused) was not evicted")
	}
	if _, ok, _ := s.Lookup(hubSource("b.gguf").Key()); !ok {
		t.Error("b (leased) was evicted")
	}
	if !strings.Contains(ev.text(), "Evicted llmgw/tiny@main (a.gguf)") {
		t.Errorf("events:\n%s", ev.text())
	}
	if err := s.Acquire(hubSource("c.gguf").Key(), "task-c", os.Getpid()); err != nil {
		t.Fatal(err)
	}
	_, err := s.Ensure(t.Context(), hubSource("a.gguf"), "", nil)
	if err == nil || !strings.Contains(err.Error(), "the budget is 2.5 MiB") {
		t.Errorf("every model in use: %v, want a refusal naming the budget", err)
	}
	// Released, c may go.
	if err := s.Release(hubSource("c.gguf").Key(), "task-c"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ensure(t.Context(), hubSource("a.gguf"), "", nil); err != nil {
		t.Errorf("after the release: %v", err)
	}
}

// Sources are checked, naming the field.
func TestSourceValidate(t *testing.T) {
	for _, c := range []struct {
		src  weights.Source
		want string
	}{
		{weights.Source{}, "exactly one"},
		{weights.Source{Hub: &weights.Hub{Repo: "noslash", Files: []string{"a"}}}, "weights.hub.repo"},
		{weights.Source{Hub: &weights.Hub{Repo: "a/b"}}, "weights.hub.files"},
		{weights.Source{Hub: &weights.Hub{Repo: "a/b", Files: []string{"../x"}}}, "weights.hub.files[0]"},
		{weights.Source{Hub: &weights.Hub{Repo: "a/b", Revision: "a b", Files: []string{"x"}}}, "weights.hub.revision"},
		{weights.Source{URLs: []weights.URL{{URL: "ftp://x/y"}}}, "weights.urls[0]: url"},
		{weights.Source{URLs: []weights.URL{{URL: "https://x/y", SHA256: "abc"}}}, "weights.urls[0].sha256"},
		{weights.Source{Path: "rel/x"}, "weights.path"},
	} {
		if err := c.src.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.src, err, c.want)
		}
	}
	a := weights.Source{Hub: &weights.Hub{Repo: "Org/Model.GGUF", Files: []string{"q4.gguf"}}}
	b := weights.Source{Hub: &weights.Hub{Repo: "Org/Model.GGUF", Files: []string{"q8.gguf"}}}
	if a.Key() == b.Key() || !strings.HasPrefix(a.Key(), "org--model_gguf--main-") {
		t.Errorf("keys %s and %s", a.Key(), b.Key())
	}
}

// A hub that holds a GET without sending (a stalled proxy) is given up
// after StallTimeout, and the next try resumes from what came.
func TestStalledFetchResumes(t *testing.T) {
	hub := hubserver.Start(t, hubserver.Options{})
	data := model(3<<20, 14)
	hub.Add(repo, "main", map[string][]byte{"tiny.gguf": data})
	release := hub.Stall(repo, "tiny.gguf", 1<<20, 0, 1) // held after 1 MiB until released
	t.Cleanup(release)
	s, err := weights.Open(weights.Config{Dir: t.TempDir(), HubURL: hub.URL(), RetryWait: time.Millisecond, StallTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var ev events
	m, err := s.Ensure(t.Context(), hubSource("tiny.gguf"), "", ev.add)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(m.Dir, "tiny.gguf")); !bytes.Equal(got, data) {
		t.Error("the file differs after the stall")
	}
	st := hub.Stats(repo, "tiny.gguf")
	if st.Gets != 2 || st.RangeStarts[1] != 1<<20 {
		t.Errorf("gets %d from %v, want the second from 1 MiB", st.Gets, st.RangeStarts)
	}
	if !strings.Contains(ev.text(), "nothing received for 300ms") {
		t.Errorf("events do not say the stall:\n%s", ev.text())
	}
}
