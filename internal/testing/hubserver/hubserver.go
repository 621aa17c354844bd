// Package hubserver is a local stand-in for the Hugging Face hub's download
// protocol, for tests, the e2e suite and make demo (llmgw-tinymodel hub): it
// serves repositories registered here, on loopback, the way the hub answers
// huggingface_hub's client, and it can be told to fail the ways a network and
// a CDN fail (cut bodies, corrupt bytes, stalls, refusals, a slow link). It
// counts what it served, exactly, so that a test can say "fetched once" and
// "resumed from byte N". It never contacts anything itself.
//
// The protocol, as huggingface_hub's own source reads it:
//
//   - file_download.py, hf_hub_url: a file is at
//     {endpoint}/{repo_id}/resolve/{revision}/{filename}, the revision quoted
//     whole (quote(revision, safe=""): refs/pr/1 arrives as refs%2Fpr%2F1) and
//     the filename quoted with its slashes kept. Repository ids here are
//     org/name (models; no datasets/ or spaces/ prefix).
//   - file_download.py, get_hf_file_metadata: a HEAD with Accept-Encoding:
//     identity that follows only relative redirects (_request_wrapper's
//     follow_relative_redirects: a relative Location is a renamed repository,
//     an absolute one the CDN, which it does not follow). It reads
//     X-Repo-Commit, X-Linked-Etag before ETag, X-Linked-Size before
//     Content-Length, and Location when redirected; _normalize_etag strips W/
//     and the quotes. So resolve answers with all of those, the sha256 of the
//     file as its etag (hf_hub_url's notes: an LFS file's etag is its sha256),
//     and with Options.Redirect an absolute Location to this server's blob URL.
//   - file_download.py, _get_metadata_or_catch_error: on EntryNotFound it
//     reads X-Repo-Commit from the 404 (to remember the file is absent at that
//     commit), so that 404 carries it; it drops Authorization when the
//     Location's host differs from the hub's.
//   - file_download.py, http_get: resumes with Range: bytes=N- (or shifts the
//     caller's range, _adjust_range_header), starts over when a 200 answers a
//     Range, and checks the size it got against the expected one. Bodies are
//     served with net/http's ServeContent: 206 and Content-Range, every range
//     form, If-Range against the etag.
//   - utils/_http.py, hf_raise_for_status: the header X-Error-Code picks the
//     error, whatever the status (RevisionNotFound, EntryNotFound, GatedRepo,
//     RepoNotFound), X-Error-Message and the body's {"error": "..."} are the
//     message. Its comment notes the hub answers 401 for gated and private
//     repositories to a client without a token; a gated repository here
//     answers 401 GatedRepo without a token and 403 GatedRepo to a token that
//     is not its own (the hub's answer to a user not on the repository's list;
//     the code, not the status, is what the client keys off).
//   - hf_api.py, model_info: GET {endpoint}/api/models/{repo_id}, or
//     .../revision/{quote(revision, safe="")}, with blobs=True when
//     files_metadata is asked. ModelInfo reads id, sha, gated, private,
//     siblings; RepoSibling reads rfilename, size, blobId and lfs {size,
//     sha256, pointerSize} (pointerSize is indexed, not optional, when lfs is
//     there). Without blobs a sibling is its rfilename only. A gated
//     repository's info is public, as on the hub; its files are not. No
//     revision means main, and so does HEAD (git's default branch, which
//     huggingface.js's modelInfo asks for) unless a revision is named HEAD.
//
// Every file is an LFS file: blobId is the git id of its LFS pointer, its
// etag its sha256. A revision's commit is a sha1 over the repository and its
// files (path and sha256), so the same files give the same commit; the
// commit is a revision too, and stays one after the revision moves on.
//
// Start gives a test a running server; New, Listen and Close do the same for
// a command (the Server is an http.Handler too). Faults (Cut, Corrupt, Stall,
// Refuse, Throttle) are set at run time from any goroutine; Stats and
// Requests read the counters. The package imports neither testing nor
// httptest, so that the llmgw-tinymodel binary may link it; Start takes the
// TB interface, which *testing.T satisfies.
package hubserver

import (
	"bytes"
	"crypto/sha1" // git's object ids are sha1; nothing here relies on it for security
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configure a Server.
type Options struct {
	// Redirect makes resolve answer with a 302 to the file's blob URL on this
	// server ({base}/_lfs/{repo}/{sha256}/{path}, absolute), as the hub sends
	// LFS files to its CDN: the X-Repo-Commit, X-Linked-Etag and
	// X-Linked-Size headers come on the 302, the bytes from the blob URL, which
	// asks no token. A client must follow it with its Range kept.
	Redirect bool
}

// TB is the part of testing.TB that Start uses; *testing.T, *testing.B and
// *testing.F satisfy it. (The package does not import testing, so that a
// development binary may link it.)
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Server is a local hub. Its methods are safe for concurrent use.
type Server struct {
	opts Options

	mu       sync.Mutex
	repos    map[string]*repo
	faults   []*fault
	stats    map[statKey]*Stats
	requests int
	closed   bool
	srv      *http.Server
	ln       net.Listener
	done     chan struct{} // closed by Close: stalls and throttles end
	inflight sync.WaitGroup
}

type repo struct {
	token   string
	refs    map[string]string  // revision name → commit sha
	commits map[string]*commit // commit sha → files
	blobs   map[string]*entry  // sha256 → a file with that content
}

type commit struct {
	sha   string
	files map[string]*entry
}

// entry is one file: its bytes in memory, or a file on disk read at each
// request.
type entry struct {
	path   string
	size   int64
	sha256 string
	data   []byte
	disk   string
}

// New returns a server with no repositories that is not listening yet:
// call Listen, or serve it as an http.Handler.
func New(opts Options) *Server {
	return &Server{
		opts:  opts,
		repos: map[string]*repo{},
		stats: map[statKey]*Stats{},
		done:  make(chan struct{}),
	}
}

// Start returns a server listening on a free port of 127.0.0.1, closed when
// the test ends.
func Start(tb TB, opts Options) *Server {
	tb.Helper()
	s := New(opts)
	if err := s.Listen("127.0.0.1:0"); err != nil {
		tb.Fatalf("hubserver: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Listen serves on addr (host:port; port 0 picks a free one) in the
// background, until Close. A server listens once.
func (s *Server) Listen(addr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("the server is closed")
	}
	if s.ln != nil {
		return errors.New("the server is listening already")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return nil
}

// URL is the hub's endpoint, http://host:port without a trailing slash (what
// HF_ENDPOINT would be); empty before Listen.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return "http://" + s.ln.Addr().String()
}

// Close stops listening, closes every connection, ends stalls and waits for
// the requests in flight to return. Requests that arrive later are answered
// 503.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	srv := s.srv
	s.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
	s.inflight.Wait()
}

// Add registers files (repository path → content) as repo's revision, which
// points at the commit it returns from then on; the files replace what the
// revision held. repo is org/name. The commit (40 hex) depends on repo and
// the files only. Add panics on a malformed repo, revision or path, as a
// test's mistake.
func (s *Server) Add(repo, revision string, files map[string][]byte) string {
	es := make([]*entry, 0, len(files))
	for p, data := range files {
		sum := sha256.Sum256(data)
		es = append(es, &entry{path: p, size: int64(len(data)), sha256: hex.EncodeToString(sum[:]), data: bytes.Clone(data)})
	}
	c, err := s.add(repo, revision, es)
	if err != nil {
		panic("hubserver: " + err.Error())
	}
	return c
}

// AddFiles is Add for files on disk (repository path → file's path): each is
// hashed once here and read from disk at each request (never held in
// memory), so it must not change while served.
func (s *Server) AddFiles(repo, revision string, files map[string]string) (string, error) {
	es := make([]*entry, 0, len(files))
	for p, disk := range files {
		sum, size, err := hashFile(disk)
		if err != nil {
			return "", err
		}
		es = append(es, &entry{path: p, size: size, sha256: sum, disk: disk})
	}
	return s.add(repo, revision, es)
}

func hashFile(name string) (string, int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = f.Close() }() // read only
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func (s *Server) add(repoID, revision string, es []*entry) (string, error) {
	if err := checkRepoID(repoID); err != nil {
		return "", err
	}
	if revision == "" {
		return "", fmt.Errorf("%s: empty revision", repoID)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].path < es[j].path })
	h := sha1.New() // a commit id, as git's
	fmt.Fprintf(h, "llmgw hubserver commit\n%s\n", repoID)
	for _, e := range es {
		if err := checkPath(e.path); err != nil {
			return "", fmt.Errorf("%s: %w", repoID, err)
		}
		fmt.Fprintf(h, "%s\x00%s\n", e.path, e.sha256)
	}
	c := &commit{sha: hex.EncodeToString(h.Sum(nil)), files: map[string]*entry{}}
	for _, e := range es {
		c.files[e.path] = e
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repoLocked(repoID)
	r.refs[revision] = c.sha
	r.commits[c.sha] = c
	for _, e := range es {
		r.blobs[e.sha256] = e
	}
	return c.sha, nil
}

// Gate makes repo gated: its files are served only to a request with
// Authorization: Bearer token; an empty token opens it again. A repo not
// added yet is created (with no revision).
func (s *Server) Gate(repo, token string) {
	if err := checkRepoID(repo); err != nil {
		panic("hubserver: " + err.Error())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repoLocked(repo).token = token
}

func (s *Server) repoLocked(id string) *repo {
	r := s.repos[id]
	if r == nil {
		r = &repo{refs: map[string]string{}, commits: map[string]*commit{}, blobs: map[string]*entry{}}
		s.repos[id] = r
	}
	return r
}

func checkRepoID(id string) error {
	org, name, ok := strings.Cut(id, "/")
	if !ok || org == "" || name == "" || strings.Contains(name, "/") || org == "api" || org == lfsPrefix {
		return fmt.Errorf("repository id %q: want org/name", id)
	}
	return nil
}

func checkPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") {
		return fmt.Errorf("file path %q: want a relative path", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("file path %q: empty, . or .. segment", p)
		}
	}
	return nil
}

// lfsPrefix is the first path segment of the blob URLs the redirect mode
// sends clients to.
const lfsPrefix = "_lfs"

// route is what a request's path names.
type route struct {
	kind     string // "resolve", "api", "blob" or "" (unknown)
	repo     string
	revision string // resolve, api ("" for api: main)
	file     string // resolve, blob
	sha256   string // blob
}

// parseRoute splits the escaped path so that an escaped slash (a revision
// quoted whole) stays inside its segment.
func parseRoute(u *url.URL) route {
	raw := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/")
	segs := make([]string, len(raw))
	for i, s := range raw {
		v, err := url.PathUnescape(s)
		if err != nil {
			return route{}
		}
		segs[i] = v
	}
	switch {
	case len(segs) >= 4 && segs[0] == "api" && segs[1] == "models":
		rt := route{kind: "api", repo: segs[2] + "/" + segs[3]}
		switch {
		case len(segs) == 4:
		case len(segs) == 6 && segs[4] == "revision" && segs[5] != "":
			rt.revision = segs[5]
		default:
			return route{}
		}
		return rt
	case len(segs) >= 5 && segs[0] == lfsPrefix:
		return route{kind: "blob", repo: segs[1] + "/" + segs[2], sha256: segs[3], file: strings.Join(segs[4:], "/")}
	case len(segs) >= 5 && segs[2] == "resolve" && segs[3] != "":
		return route{kind: "resolve", repo: segs[0] + "/" + segs[1], revision: segs[3], file: strings.Join(segs[4:], "/")}
	}
	return route{}
}

// ServeHTTP answers one request of the hub's protocol.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "", "the hub is closed")
		return
	}
	s.inflight.Add(1)
	defer s.inflight.Done()
	s.requests++
	rt := parseRoute(r.URL)
	refuse := s.takeLocked(faultRefuse, rt.repo, rt.file)
	s.mu.Unlock()

	if refuse != nil {
		writeError(w, refuse.status, "", fmt.Sprintf("refused (%d) by the test", refuse.status))
		return
	}
	if rt.kind == "" {
		writeError(w, http.StatusNotFound, "", "not found")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "", r.Method+" is not allowed")
		return
	}
	switch rt.kind {
	case "resolve":
		s.serveResolve(w, r, rt)
	case "api":
		s.serveInfo(w, r, rt)
	case "blob":
		s.serveBlob(w, r, rt)
	}
}

// lookup finds the repository and the commit a revision names, or writes
// the hub's error for it. auth says whether the repository's gate applies.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, repoID, revision string, auth bool) (*commit, bool, bool) {
	s.mu.Lock()
	rp := s.repos[repoID]
	var c *commit
	var token string
	if rp != nil {
		token = rp.token
		if sha, ok := rp.refs[revision]; ok {
			c = rp.commits[sha]
		} else if sha, ok := rp.refs["main"]; ok && revision == "HEAD" {
			c = rp.commits[sha] // git's HEAD: the default branch (huggingface.js asks for it)
		} else {
			c = rp.commits[revision]
		}
	}
	s.mu.Unlock()
	if rp == nil {
		writeError(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return nil, false, false
	}
	if auth && token != "" {
		got, hasAuth := bearer(r)
		switch {
		case !hasAuth:
			writeError(w, http.StatusUnauthorized, "GatedRepo",
				"Access to model "+repoID+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
			return nil, false, false
		case got != token:
			writeError(w, http.StatusForbidden, "GatedRepo",
				"Access to model "+repoID+" is restricted and you are not in the authorized list.")
			return nil, false, false
		}
	}
	if c == nil {
		writeError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+revision)
		return nil, false, false
	}
	return c, token != "", true
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true
	}
	return strings.TrimSpace(tok), true
}

func (s *Server) serveResolve(w http.ResponseWriter, r *http.Request, rt route) {
	c, _, ok := s.lookup(w, r, rt.repo, rt.revision, true)
	if !ok {
		return
	}
	e := c.files[rt.file]
	if e == nil {
		w.Header().Set("X-Repo-Commit", c.sha)
		writeError(w, http.StatusNotFound, "EntryNotFound", rt.file+" does not exist on \""+rt.revision+"\"")
		return
	}
	h := w.Header()
	h.Set("X-Repo-Commit", c.sha)
	h.Set("ETag", `"`+e.sha256+`"`)
	h.Set("X-Linked-Etag", `"`+e.sha256+`"`)
	h.Set("X-Linked-Size", strconv.FormatInt(e.size, 10))
	if s.opts.Redirect {
		s.count(rt.repo, rt.file, func(st *Stats) {
			st.Redirects++
			if r.Method == http.MethodHead {
				st.Heads++
			}
		})
		loc := "http://" + r.Host + "/" + lfsPrefix + "/" + rt.repo + "/" + e.sha256 + "/" + escapePath(rt.file)
		http.Redirect(w, r, loc, http.StatusFound)
		return
	}
	s.serveFile(w, r, rt.repo, rt.file, e)
}

func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request, rt route) {
	s.mu.Lock()
	var e *entry
	if rp := s.repos[rt.repo]; rp != nil {
		e = rp.blobs[rt.sha256]
	}
	s.mu.Unlock()
	if e == nil {
		writeError(w, http.StatusNotFound, "", "no such blob")
		return
	}
	w.Header().Set("ETag", `"`+e.sha256+`"`)
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename*=UTF-8''%s; filename="%s";`,
		url.PathEscape(path.Base(rt.file)), path.Base(rt.file)))
	s.serveFile(w, r, rt.repo, rt.file, e)
}

func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// Sibling is one file of the model-info answer (hf_api.py's RepoSibling).
type Sibling struct {
	RFilename string   `json:"rfilename"`
	Size      *int64   `json:"size,omitempty"`
	BlobID    string   `json:"blobId,omitempty"`
	LFS       *LFSInfo `json:"lfs,omitempty"`
}

// LFSInfo is a sibling's LFS object (hf_api.py's BlobLfsInfo).
type LFSInfo struct {
	Size        int64  `json:"size"`
	SHA256      string `json:"sha256"`
	PointerSize int    `json:"pointerSize"`
}

// ModelInfo is the model-info answer, the fields hf_api.py's ModelInfo
// reads that a local hub knows.
type ModelInfo struct {
	ID       string    `json:"id"`
	SHA      string    `json:"sha"`
	Private  bool      `json:"private"`
	Gated    any       `json:"gated"` // false, or "manual"
	Siblings []Sibling `json:"siblings"`
}

func (s *Server) serveInfo(w http.ResponseWriter, r *http.Request, rt route) {
	rev := rt.revision
	if rev == "" {
		rev = "main"
	}
	c, gated, ok := s.lookup(w, r, rt.repo, rev, false)
	if !ok {
		return
	}
	blobs, _ := strconv.ParseBool(r.URL.Query().Get("blobs"))
	info := ModelInfo{ID: rt.repo, SHA: c.sha, Gated: false, Siblings: []Sibling{}}
	if gated {
		info.Gated = "manual"
	}
	paths := make([]string, 0, len(c.files))
	for p := range c.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		sib := Sibling{RFilename: p}
		if blobs {
			e := c.files[p]
			ptr := lfsPointer(e)
			size := e.size
			sib.Size = &size
			sib.BlobID = gitBlobID(ptr)
			sib.LFS = &LFSInfo{Size: e.size, SHA256: e.sha256, PointerSize: len(ptr)}
		}
		info.Siblings = append(info.Siblings, sib)
	}
	body, err := json.Marshal(info)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	s.count(rt.repo, "", func(st *Stats) { st.Gets++ })
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

// lfsPointer is the git-lfs pointer file that stands for e in the
// repository's git tree.
func lfsPointer(e *entry) []byte {
	return fmt.Appendf(nil, "version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", e.sha256, e.size)
}

// gitBlobID is git's object id of a blob with content b.
func gitBlobID(b []byte) string {
	h := sha1.New() // git's object id
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// writeError answers as the hub does: status, X-Error-Code (when code is
// set), X-Error-Message and a JSON body {"error": msg}.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	h := w.Header()
	if code != "" {
		h.Set("X-Error-Code", code)
	}
	h.Set("X-Error-Message", msg)
	body, _ := json.Marshal(map[string]string{"error": msg})
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
