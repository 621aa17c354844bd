package hubserver_test

import (
	"bytes"
	"context"
	"crypto/sha1" // git's object ids, to check blobId
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/testing/hubserver"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

const repo = "llmgw/tiny"

// content is n deterministic bytes that are not all equal.
func content(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// answer is a response read whole.
type answer struct {
	status int
	header http.Header
	method string
	url    string // where the request ended, after redirects
}

// do sends one request and reads the whole body; err is the body's read
// error (a cut body), the request's own failing the test.
func do(t *testing.T, c *http.Client, method, url string, hdr ...string) (answer, []byte, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, resp.Request.Method, resp.Request.URL.String()}, body, err
}

// noRedirect is a client that returns a 302 instead of following it.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func TestResolveHeadAndGet(t *testing.T) {
	s := hubserver.Start(t, hubserver.Options{})
	data := content(5000)
	commit := s.Add(repo, "main", map[string][]byte{"tiny.gguf": data, "sub/dir/config.json": []byte(`{"a":1}`)})
	if len(commit) != 40 {
		t.Fatalf("commit %q: want 40 hex", commit)
	}
	if _, err := hex.DecodeString(commit); err != nil {
		t.Fatalf("commit %q: %v", commit, err)
	}
	url := s.URL() + "/" + repo + "/resolve/main/tiny.gguf"

	resp, body, err := do(t, nil, http.MethodHead, url, "Accept-Encoding", "identity")
	if err != nil || resp.status != http.StatusOK || len(body) != 0 {
		t.Fatalf("HEAD: %d, %d bytes, %v", resp.status, len(body), err)
	}
	want := map[string]string{
		"X-Repo-Commit":  commit,
		"ETag":           `"` + sum(data) + `"`,
		"X-Linked-Etag":  `"` + sum(data) + `"`,
		"X-Linked-Size":  "5000",
		"Content-Length": "5000",
		"Accept-Ranges":  "bytes",
	}
	for k, v := range want {
		if got := resp.header.Get(k); got != v {
			t.Errorf("HEAD %s: %q, want %q", k, got, v)
		}
	}

	for _, rev := range []string{"main", commit} {
		resp, body, err = do(t, nil, http.MethodGet, s.URL()+"/"+repo+"/resolve/"+rev+"/tiny.gguf")
		if err != nil || resp.status != http.StatusOK || !bytes.Equal(body, data) {
			t.Fatalf("GET at %s: %d, %d bytes, %v", rev, resp.status, len(body), err)
		}
		if got := resp.header.Get("X-Repo-Commit"); got != commit {
			t.Errorf("GET at %s: X-Repo-Commit %q, want %q", rev, got, commit)
		}
	}
	// A path with directories.
	resp, body, _ = do(t, nil, http.MethodGet, s.URL()+"/"+repo+"/resolve/main/sub/dir/config.json")
	if resp.status != http.StatusOK || string(body) != `{"a":1}` {
		t.Fatalf("GET sub/dir/config.json: %d %q", resp.status, body)
	}

	st := s.Stats(repo, "tiny.gguf")
	if st.Heads != 1 || st.Gets != 2 || st.BodyBytes != 10000 || fmt.Sprint(st.RangeStarts) != "[0 0]" {
		t.Errorf("stats %+v: want 1 HEAD, 2 GETs from 0, 10000 bytes", st)
	}
	if got := s.Requests(); got != 4 {
		t.Errorf("Requests() = %d, want 4", got)
	}
}

func TestCommits(t *testing.T) {
	a := hubserver.Start(t, hubserver.Options{})
	b := hubserver.Start(t, hubserver.Options{})
	files := map[string][]byte{"x": []byte("one"), "y": []byte("two")}
	c1 := a.Add(repo, "main", files)
	if c := b.Add(repo, "v1", files); c != c1 {
		t.Errorf("the same files gave commits %s and %s", c1, c)
	}
	if c := b.Add("llmgw/other", "main", files); c == c1 {
		t.Errorf("another repository gave the same commit %s", c)
	}
	c2 := a.Add(repo, "main", map[string][]byte{"x": []byte("ONE")})
	if c2 == c1 {
		t.Fatalf("other files gave the same commit %s", c1)
	}
	// main moved on; the old commit still answers, with its own files.
	resp, body, _ := do(t, nil, http.MethodGet, a.URL()+"/"+repo+"/resolve/main/x")
	if resp.status != http.StatusOK || string(body) != "ONE" || resp.header.Get("X-Repo-Commit") != c2 {
		t.Errorf("main: %d %q at %s, want ONE at %s", resp.status, body, resp.header.Get("X-Repo-Commit"), c2)
	}
	resp, body, _ = do(t, nil, http.MethodGet, a.URL()+"/"+repo+"/resolve/"+c1+"/y")
	if resp.status != http.StatusOK || string(body) != "two" || resp.header.Get("X-Repo-Commit") != c1 {
		t.Errorf("old commit: %d %q at %s", resp.status, body, resp.header.Get("X-Repo-Commit"))
	}
	resp, _, _ = do(t, nil, http.MethodGet, a.URL()+"/"+repo+"/resolve/main/y")
	if resp.status != http.StatusNotFound {
		t.Errorf("y after main moved: %d, want 404", resp.status)
	}
	// A revision with a slash arrives quoted whole, as hf_hub_url sends it.
	c3 := a.Add(repo, "refs/pr/1", map[string][]byte{"z": []byte("pr")})
	resp, body, _ = do(t, nil, http.MethodGet, a.URL()+"/"+repo+"/resolve/refs%2Fpr%2F1/z")
	if resp.status != http.StatusOK || string(body) != "pr" || resp.header.Get("X-Repo-Commit") != c3 {
		t.Errorf("refs/pr/1: %d %q", resp.status, body)
	}
}

func TestRanges(t *testing.T) {
	s := hubserver.Start(t, hubserver.Options{})
	data := content(1000)
	s.Add(repo, "main", map[string][]byte{"f": data})
	url := s.URL() + "/" + repo + "/resolve/main/f"
	for _, c := range []struct {
		rng        string
		from, to   int // to exclusive
		contentRng string
	}{
		{"bytes=100-", 100, 1000, "bytes 100-999/1000"},
		{"bytes=10-19", 10, 20, "bytes 10-19/1000"},
		{"bytes=-50", 950, 1000, "bytes 950-999/1000"},
		{"bytes=999-", 999, 1000, "bytes 999-999/1000"},
	} {
		resp, body, err := do(t, nil, http.MethodGet, url, "Range", c.rng)
		if err != nil || resp.status != http.StatusPartialContent {
			t.Errorf("%s: %d, %v", c.rng, resp.status, err)
			continue
		}
		if !bytes.Equal(body, data[c.from:c.to]) {
			t.Errorf("%s: got %d bytes, not data[%d:%d]", c.rng, len(body), c.from, c.to)
		}
		if got := resp.header.Get("Content-Range"); got != c.contentRng {
			t.Errorf("%s: Content-Range %q, want %q", c.rng, got, c.contentRng)
		}
	}
	resp, _, _ := do(t, nil, http.MethodGet, url, "Range", "bytes=1000-")
	if resp.status != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("bytes=1000-: %d, want 416", resp.status)
	}
	// If-Range with the etag resumes; with another etag it starts over.
	etag := `"` + sum(data) + `"`
	resp, body, _ := do(t, nil, http.MethodGet, url, "Range", "bytes=500-", "If-Range", etag)
	if resp.status != http.StatusPartialContent || !bytes.Equal(body, data[500:]) {
		t.Errorf("If-Range with the etag: %d, %d bytes", resp.status, len(body))
	}
	resp, body, _ = do(t, nil, http.MethodGet, url, "Range", "bytes=500-", "If-Range", `"other"`)
	if resp.status != http.StatusOK || !bytes.Equal(body, data) {
		t.Errorf("If-Range with another etag: %d, %d bytes", resp.status, len(body))
	}
	st := s.Stats(repo, "f")
	if want := "[100 10 950 999 1000 500 500]"; fmt.Sprint(st.RangeStarts) != want {
		t.Errorf("RangeStarts %v, want %s", st.RangeStarts, want)
	}
	if st.Gets != 7 {
		t.Errorf("Gets %d, want 7", st.Gets)
	}
}

// hubError checks an error answer: status, X-Error-Code and the JSON body.
func hubError(t *testing.T, what string, resp answer, body []byte, status int, code string) {
	t.Helper()
	if resp.status != status {
		t.Errorf("%s: status %d, want %d", what, resp.status, status)
	}
	if got := resp.header.Get("X-Error-Code"); got != code {
		t.Errorf("%s: X-Error-Code %q, want %q", what, got, code)
	}
	var e struct {
		Error string `json:"error"`
	}
	if resp.method == http.MethodHead {
		return
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		t.Errorf("%s: body %q: want {\"error\": ...} (%v)", what, body, err)
	}
	if resp.header.Get("X-Error-Message") != e.Error {
		t.Errorf("%s: X-Error-Message %q, body's error %q", what, resp.header.Get("X-Error-Message"), e.Error)
	}
}

func TestErrors(t *testing.T) {
	s := hubserver.Start(t, hubserver.Options{})
	commit := s.Add(repo, "main", map[string][]byte{"f": []byte("x")})
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		resp, body, _ := do(t, nil, method, s.URL()+"/llmgw/nope/resolve/main/f")
		hubError(t, method+" unknown repo", resp, body, http.StatusNotFound, "RepoNotFound")
		resp, body, _ = do(t, nil, method, s.URL()+"/"+repo+"/resolve/v9/f")
		hubError(t, method+" unknown revision", resp, body, http.StatusNotFound, "RevisionNotFound")
		if resp.header.Get("X-Repo-Commit") != "" {
			t.Errorf("unknown revision: X-Repo-Commit %q", resp.header.Get("X-Repo-Commit"))
		}
		resp, body, _ = do(t, nil, method, s.URL()+"/"+repo+"/resolve/main/g")
		hubError(t, method+" unknown file", resp, body, http.StatusNotFound, "EntryNotFound")
		if got := resp.header.Get("X-Repo-Commit"); got != commit {
			t.Errorf("unknown file: X-Repo-Commit %q, want %q", got, commit)
		}
	}
	resp, body, _ := do(t, nil, http.MethodGet, s.URL()+"/nothing/here")
	hubError(t, "unknown path", resp, body, http.StatusNotFound, "")
	resp, body, _ = do(t, nil, http.MethodPost, s.URL()+"/"+repo+"/resolve/main/f")
	hubError(t, "POST", resp, body, http.StatusMethodNotAllowed, "")
	if got := s.Stats(repo, "f"); got.Gets != 0 || got.Heads != 0 || got.BodyBytes != 0 {
		t.Errorf("stats of f after errors only: %+v", got)
	}
}

func TestGated(t *testing.T) {
	s := hubserver.Start(t, hubserver.Options{})
	s.Add(repo, "main", map[string][]byte{"f": []byte("secret")})
	s.Gate(repo, "hf_good")
	url := s.URL() + "/" + repo + "/resolve/main/f"

	resp, body, _ := do(t, nil, http.MethodGet, url)
	hubError(t, "no token", resp, body, http.StatusUnauthorized, "GatedRepo")
	resp, body, _ = do(t, nil, http.MethodHead, url, "Authorization", "Bearer hf_bad")
	hubError(t, "HEAD, wrong token", resp, body, http.StatusForbidden, "GatedRepo")
	resp, body, _ = do(t, nil, http.MethodGet, url, "Authorization", "Basic aGY6Z29vZA==")
	hubError(t, "not a bearer token", resp, body, http.StatusForbidden, "GatedRepo")
	// The gate comes before the revision, as on the hub.
	resp, body, _ = do(t, nil, http.MethodGet, s.URL()+"/"+repo+"/resolve/nope/f")
	hubError(t, "unknown revision, no token", resp, body, http.StatusUnauthorized, "GatedRepo")

	resp, body, _ = do(t, nil, http.MethodGet, url, "Authorization", "Bearer hf_good")
	if resp.status != http.StatusOK || string(body) != "secret" {
		t.Errorf("good token: %d %q", resp.status, body)
	}
	// The model info of a gated repository is public and says it is gated.
	resp, body, _ = do(t, nil, http.MethodGet, s.URL()+"/api/models/"+repo)
	var info struct {
		Gated any `json:"gated"`
	}
	if err := json.Unmarshal(body, &info); err != nil || resp.status != http.StatusOK || info.Gated != "manual" {
		t.Errorf("model info of a gated repo: %d %s (%v)", resp.status, body, err)
	}
	s.Gate(repo, "")
	resp, _, _ = do(t, nil, http.MethodGet, url)
	if resp.status != http.StatusOK {
		t.Errorf("ungated: %d", resp.status)
	}
	if got := s.Stats(repo, "f").Gets; got != 2 {
		t.Errorf("Gets %d, want 2 (the refused ones do not count)", got)
	}
}

func TestModelInfo(t *testing.T) {
	s := hubserver.Start(t, hubserver.Options{})
	big, small := content(3000), []byte("{}")
	commit := s.Add(repo, "main", map[string][]byte{"tiny.gguf": big, "config.json": small})
	s.Add(repo, "v2", map[string][]byte{"other": small})

	type lfs struct {
		Size        int64  `json:"size"`
		SHA256      string `json:"sha256"`
		PointerSize int    `json:"pointerSize"`
	}
	type sibling struct {
		RFilename string `json:"rfilename"`
		Size      *int64 `json:"size"`
		BlobID    string `json:"blobId"`
		LFS       *lfs   `json:"lfs"`
	}
	type info struct {
		ID       string    `json:"id"`
		SHA      string    `json:"sha"`
		Gated    any       `json:"gated"`
		Private  *bool     `json:"private"`
		Siblings []sibling `json:"siblings"`
	}
	get := func(path string) (info, answer, []byte) {
		t.Helper()
		resp, body, err := do(t, nil, http.MethodGet, s.URL()+path)
		if err != nil {
			t.Fatal(err)
		}
		var i info
		if resp.status == http.StatusOK {
			if err := json.Unmarshal(body, &i); err != nil {
				t.Fatalf("%s: %v: %s", path, err, body)
			}
		}
		return i, resp, body
	}

	// requests sends Python's True as "True".
	for _, path := range []string{
		"/api/models/" + repo + "/revision/main?blobs=True",
		"/api/models/" + repo + "?blobs=true",
		"/api/models/" + repo + "/revision/HEAD?blobs=true",
		"/api/models/" + repo + "/revision/" + commit + "?blobs=1",
	} {
		i, resp, body := get(path)
		if resp.status != http.StatusOK || i.ID != repo || i.SHA != commit || i.Gated != false || i.Private == nil || *i.Private {
			t.Fatalf("%s: %d %s", path, resp.status, body)
		}
		if len(i.Siblings) != 2 || i.Siblings[0].RFilename != "config.json" || i.Siblings[1].RFilename != "tiny.gguf" {
			t.Fatalf("%s: siblings %s", path, body)
		}
		for _, sib := range i.Siblings {
			data := small
			if sib.RFilename == "tiny.gguf" {
				data = big
			}
			ptr := fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", sum(data), len(data))
			h := sha1.New() // git's object id
			fmt.Fprintf(h, "blob %d\x00%s", len(ptr), ptr)
			want := sibling{RFilename: sib.RFilename, BlobID: hex.EncodeToString(h.Sum(nil)),
				LFS: &lfs{Size: int64(len(data)), SHA256: sum(data), PointerSize: len(ptr)}}
			if sib.Size == nil || *sib.Size != int64(len(data)) || sib.BlobID != want.BlobID || sib.LFS == nil || *sib.LFS != *want.LFS {
				t.Errorf("%s: sibling %s: %+v (lfs %+v), want blobId %s lfs %+v", path, sib.RFilename, sib, sib.LFS, want.BlobID, *want.LFS)
			}
		}
	}
	// Without blobs a sibling is its name only.
	i, resp, body := get("/api/models/" + repo + "/revision/v2")
	if resp.status != http.StatusOK || len(i.Siblings) != 1 || i.Siblings[0].RFilename != "other" {
		t.Fatalf("v2: %d %s", resp.status, body)
	}
	if strings.Contains(string(body), "size") || strings.Contains(string(body), "lfs") {
		t.Errorf("v2 without blobs: %s has sizes", body)
	}
	_, resp, body = get("/api/models/llmgw/nope")
	hubError(t, "model info, unknown repo", resp, body, http.StatusNotFound, "RepoNotFound")
	_, resp, body = get("/api/models/" + repo + "/revision/v9")
	hubError(t, "model info, unknown revision", resp, body, http.StatusNotFound, "RevisionNotFound")
	if got := s.Stats(repo, "").Gets; got != 5 {
		t.Errorf("model-info Gets %d, want 5", got)
	}
}

func TestRedirect(t *testing.T) {
	s := hubserver.Start(t, hubserver.Options{Redirect: true})
	data := content(2000)
	commit := s.Add(repo, "main", map[string][]byte{"dir/w.gguf": data})
	s.Gate(repo, "tok")
	url := s.URL() + "/" + repo + "/resolve/main/dir/w.gguf"

	// HEAD as get_hf_file_metadata sends it: the 302 carries the metadata
	// and an absolute Location (the CDN), which it does not follow.
	resp, _, _ := do(t, noRedirect, http.MethodHead, url, "Authorization", "Bearer tok")
	if resp.status != http.StatusFound {
		t.Fatalf("HEAD: %d, want 302", resp.status)
	}
	loc := resp.header.Get("Location")
	if !strings.HasPrefix(loc, s.URL()+"/") {
		t.Errorf("Location %q is not an absolute URL on %s", loc, s.URL())
	}
	for k, v := range map[string]string{"X-Repo-Commit": commit, "X-Linked-Etag": `"` + sum(data) + `"`, "X-Linked-Size": "2000"} {
		if got := resp.header.Get(k); got != v {
			t.Errorf("302 %s: %q, want %q", k, got, v)
		}
	}
	// The blob URL wants no token; a HEAD there gives the size.
	resp, _, _ = do(t, nil, http.MethodHead, loc)
	if resp.status != http.StatusOK || resp.header.Get("Content-Length") != "2000" {
		t.Errorf("HEAD blob: %d, Content-Length %q", resp.status, resp.header.Get("Content-Length"))
	}
	// A GET followed by the client keeps its Range.
	resp, body, err := do(t, nil, http.MethodGet, url, "Authorization", "Bearer tok", "Range", "bytes=1500-")
	if err != nil || resp.status != http.StatusPartialContent || !bytes.Equal(body, data[1500:]) {
		t.Fatalf("GET through the redirect: %d, %d bytes, %v", resp.status, len(body), err)
	}
	if resp.url != loc {
		t.Errorf("the GET ended at %s, want %s", resp.url, loc)
	}
	// Without the token the resolve refuses before redirecting.
	resp, body, _ = do(t, noRedirect, http.MethodGet, url)
	hubError(t, "redirect mode, no token", resp, body, http.StatusUnauthorized, "GatedRepo")

	st := s.Stats(repo, "dir/w.gguf")
	if st.Redirects != 2 || st.Heads != 2 || st.Gets != 1 || st.BodyBytes != 500 || fmt.Sprint(st.RangeStarts) != "[1500]" {
		t.Errorf("stats %+v: want 2 redirects, 2 HEADs, 1 GET of 500 bytes from 1500", st)
	}
	resp, body, _ = do(t, nil, http.MethodGet, s.URL()+"/_lfs/"+repo+"/"+strings.Repeat("0", 64)+"/x")
	hubError(t, "unknown blob", resp, body, http.StatusNotFound, "")
}

func TestCut(t *testing.T) {
	s := hubserver.Start(t, hubserver.Options{})
	data := content(100)
	s.Add(repo, "main", map[string][]byte{"f": data, "g": data})
	url := s.URL() + "/" + repo + "/resolve/main/f"

	s.Cut(repo, "f", 30, 1)
	resp, body, err := do(t, nil, http.MethodGet, url)
	if resp.status != http.StatusOK || !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Equal(body, data[:30]) {
		t.Fatalf("cut GET: %d, %d bytes, %v; want 30 bytes and an unexpected EOF", resp.status, len(body), err)
	}
	// Once: the resume gets the rest.
	resp, body, err = do(t, nil, http.MethodGet, url, "Range", "bytes=30-")
	if err != nil || resp.status != http.StatusPartialContent || !bytes.Equal(body, data[30:]) {
		t.Fatalf("resume: %d, %d bytes, %v", resp.status, len(body), err)
	}
	// Other files are not cut.
	if _, body, err = do(t, nil, http.MethodGet, s.URL()+"/"+repo+"/resolve/main/g"); err != nil || len(body) != 100 {
		t.Fatalf("g: %d bytes, %v", len(body), err)
	}
	st := s.Stats(repo, "f")
	if st.Gets != 2 || st.BodyBytes != 100 || fmt.Sprint(st.RangeStarts) != "[0 30]" {
		t.Errorf("stats %+v: want 2 GETs from 0 and 30, 100 bytes", st)
	}

	// Always: every GET stops 30 bytes in; a client that resumes gets there.
	s.Cut(repo, "f", 30, 0)
	var got []byte
	for i := 0; i < 10 && len(got) < len(data); i++ {
		_, body, _ := do(t, nil, http.MethodGet, url, "Range", "bytes="+strconv.Itoa(len(got))+"-")
		got = append(got, body...)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("resumed through cuts: %d bytes, not the file", len(got))
	}
	st = s.Stats(repo, "f")
	if fmt.Sprint(st.RangeStarts) != "[0 30 0 30 60 90]" || st.BodyBytes != 200 {
		t.Errorf("stats %+v: want RangeStarts [0 30 0 30 60 90], 200 bytes", st)
	}
	s.ClearFaults()
	if _, body, err = do(t, nil, http.MethodGet, url); err != nil || !bytes.Equal(body, data) {
		t.Fatalf("after ClearFaults: %d bytes, %v", len(body), err)
	}
}

func TestCorrupt(t *testing.T) {
	s := hubserver.Start(t, hubserver.Options{})
	data := content(300)
	s.Add(repo, "main", map[string][]byte{"f": data})
	url := s.URL() + "/" + repo + "/resolve/main/f"
	s.Corrupt(repo, "f", 1)
	resp, body, err := do(t, nil, http.MethodGet, url)
	if err != nil || resp.status != http.StatusOK || len(body) != len(data) {
		t.Fatalf("corrupt GET: %d, %d bytes, %v", resp.status, len(body), err)
	}
	if sum(body) == sum(data) || resp.header.Get("X-Linked-Etag") != `"`+sum(data)+`"` {
		t.Errorf("corrupt GET: sha256 %s (etag %s), want other bytes under the real etag", sum(body), resp.header.Get("X-Linked-Etag"))
	}
	for i := range body {
		if body[i] != data[i]^0xff {
			t.Fatalf("byte %d: %#x, want %#x", i, body[i], data[i]^0xff)
		}
	}
	if _, body, _ = do(t, nil, http.MethodGet, url); !bytes.Equal(body, data) {
		t.Errorf("the GET after: still corrupt")
	}
}

func TestStall(t *testing.T) {
	s := hubserver.Start(t, hubserver.Options{})
	data := content(1000)
	s.Add(repo, "main", map[string][]byte{"f": data})
	url := s.URL() + "/" + repo + "/resolve/main/f"

	t.Run("before headers, until released", func(t *testing.T) {
		release := s.Stall(repo, "f", hubserver.BeforeHeaders, 0, 1)
		before := s.Stats(repo, "f").Gets
		type result struct {
			status int
			body   []byte
			err    error
		}
		done := make(chan result, 1)
		go func() {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- result{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			done <- result{resp.StatusCode, b, err}
		}()
		wait.Until(t, "the GET to reach the file", func() bool { return s.Stats(repo, "f").Gets > before })
		select {
		case r := <-done:
			t.Fatalf("the GET returned while stalled: %d, %d bytes, %v", r.status, len(r.body), r.err)
		default:
		}
		release()
		release() // twice is fine
		r := <-done
		if r.err != nil || r.status != http.StatusOK || !bytes.Equal(r.body, data) {
			t.Fatalf("after release: %d, %d bytes, %v", r.status, len(r.body), r.err)
		}
	})

	t.Run("after bytes, until released", func(t *testing.T) {
		release := s.Stall(repo, "f", 400, 0, 1)
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		hr, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer hr.Body.Close()
		// The headers and the first 400 bytes come while it holds.
		first := make([]byte, 400)
		if _, err := io.ReadFull(hr.Body, first); err != nil || !bytes.Equal(first, data[:400]) {
			t.Fatalf("first 400 bytes: %v", err)
		}
		release()
		rest, err := io.ReadAll(hr.Body)
		if err != nil || !bytes.Equal(rest, data[400:]) {
			t.Fatalf("the rest: %d bytes, %v", len(rest), err)
		}
	})

	t.Run("for a duration", func(t *testing.T) {
		s.Stall(repo, "f", 10, time.Millisecond, 1)
		if _, body, err := do(t, nil, http.MethodGet, url); err != nil || !bytes.Equal(body, data) {
			t.Fatalf("%d bytes, %v", len(body), err)
		}
	})

	t.Run("the client gives up", func(t *testing.T) {
		release := s.Stall(repo, "f", hubserver.BeforeHeaders, 0, 0)
		defer release()
		ctx, cancel := context.WithCancel(t.Context())
		before := s.Stats(repo, "f").Gets
		errc := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		wait.Until(t, "the GET to reach the file", func() bool { return s.Stats(repo, "f").Gets > before })
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("the stalled GET returned %v, want context.Canceled", err)
		}
	})
}

func TestCloseEndsStalls(t *testing.T) {
	s := hubserver.New(hubserver.Options{})
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Listen("127.0.0.1:0"); err == nil {
		t.Error("a second Listen succeeded")
	}
	s.Add(repo, "main", map[string][]byte{"f": []byte("abc")})
	s.Stall("", "", hubserver.BeforeHeaders, 0, 0)
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL()+"/"+repo+"/resolve/main/f", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK {
				err = errors.New("answered 200")
			}
		}
		errc <- err
	}()
	wait.Until(t, "the GET to reach the file", func() bool { return s.Stats(repo, "f").Gets == 1 })
	s.Close() // returns: the stall ends with the server
	if err := <-errc; err == nil {
		t.Error("the stalled GET succeeded after Close")
	}
	s.Close()
}

func TestRefuse(t *testing.T) {
	s := hubserver.Start(t, hubserver.Options{})
	s.Add(repo, "main", map[string][]byte{"f": []byte("abc"), "g": []byte("def")})
	url := s.URL() + "/" + repo + "/resolve/main/f"
	s.Refuse(repo, "f", http.StatusServiceUnavailable, 2)
	for i := range 2 {
		resp, body, _ := do(t, nil, http.MethodGet, url)
		hubError(t, fmt.Sprintf("refused GET %d", i), resp, body, http.StatusServiceUnavailable, "")
	}
	if resp, body, _ := do(t, nil, http.MethodGet, s.URL()+"/"+repo+"/resolve/main/g"); resp.status != http.StatusOK || string(body) != "def" {
		t.Errorf("g was refused too: %d", resp.status)
	}
	if resp, body, _ := do(t, nil, http.MethodGet, url); resp.status != http.StatusOK || string(body) != "abc" {
		t.Errorf("the third GET: %d %q", resp.status, body)
	}
	if st := s.Stats(repo, "f"); st.Gets != 1 {
		t.Errorf("Gets %d, want 1 (refused GETs do not count)", st.Gets)
	}
	// Any request, the model info's included.
	s.Refuse("", "", http.StatusTooManyRequests, 1)
	resp, body, _ := do(t, nil, http.MethodGet, s.URL()+"/api/models/"+repo)
	hubError(t, "refused model info", resp, body, http.StatusTooManyRequests, "")
	if resp, _, _ := do(t, nil, http.MethodGet, s.URL()+"/api/models/"+repo); resp.status != http.StatusOK {
		t.Errorf("model info after: %d", resp.status)
	}
	if got := s.Requests(); got != 6 {
		t.Errorf("Requests() = %d, want 6", got)
	}
}

func TestThrottle(t *testing.T) {
	s := hubserver.Start(t, hubserver.Options{})
	data := content(20000)
	s.Add(repo, "main", map[string][]byte{"f": data})
	s.Throttle(repo, "f", 200000)
	s.Cut(repo, "f", 15000, 1)
	_, body, err := do(t, nil, http.MethodGet, s.URL()+"/"+repo+"/resolve/main/f")
	if !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Equal(body, data[:15000]) {
		t.Fatalf("throttled and cut: %d bytes, %v", len(body), err)
	}
	resp, body, err := do(t, nil, http.MethodGet, s.URL()+"/"+repo+"/resolve/main/f", "Range", "bytes=15000-")
	if err != nil || resp.status != http.StatusPartialContent || !bytes.Equal(body, data[15000:]) {
		t.Fatalf("throttled resume: %d, %d bytes, %v", resp.status, len(body), err)
	}
	if st := s.Stats(repo, "f"); st.BodyBytes != 20000 {
		t.Errorf("BodyBytes %d, want 20000", st.BodyBytes)
	}
}

func TestAddFiles(t *testing.T) {
	s := hubserver.Start(t, hubserver.Options{})
	dir := t.TempDir()
	data := content(4096)
	name := filepath.Join(dir, "w.bin")
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	commit, err := s.AddFiles(repo, "main", map[string]string{"w.bin": name})
	if err != nil {
		t.Fatal(err)
	}
	if c := hubserver.New(hubserver.Options{}).Add(repo, "main", map[string][]byte{"w.bin": data}); c != commit {
		t.Errorf("the same bytes from disk and memory gave commits %s and %s", commit, c)
	}
	url := s.URL() + "/" + repo + "/resolve/main/w.bin"
	resp, body, err := do(t, nil, http.MethodGet, url, "Range", "bytes=4000-")
	if err != nil || resp.status != http.StatusPartialContent || !bytes.Equal(body, data[4000:]) || resp.header.Get("X-Linked-Etag") != `"`+sum(data)+`"` {
		t.Fatalf("GET from disk: %d, %d bytes, %v", resp.status, len(body), err)
	}
	if _, err := s.AddFiles(repo, "main", map[string]string{"x": filepath.Join(dir, "missing")}); err == nil {
		t.Error("AddFiles of a missing file succeeded")
	}
	// A file that changed under the server is an error, not wrong bytes.
	if err := os.WriteFile(name, data[:10], 0o600); err != nil {
		t.Fatal(err)
	}
	if resp, _, _ = do(t, nil, http.MethodGet, url); resp.status != http.StatusInternalServerError {
		t.Errorf("GET of a changed file: %d, want 500", resp.status)
	}
}

func TestAddRefusesMalformed(t *testing.T) {
	s := hubserver.New(hubserver.Options{})
	defer s.Close()
	for _, c := range []struct{ repo, rev, path string }{
		{"tiny", "main", "f"},
		{"a/b/c", "main", "f"},
		{"api/x", "main", "f"},
		{repo, "", "f"},
		{repo, "main", "/f"},
		{repo, "main", "a/../f"},
		{repo, "main", ""},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Add(%q, %q, %q) did not panic", c.repo, c.rev, c.path)
				}
			}()
			s.Add(c.repo, c.rev, map[string][]byte{c.path: nil})
		}()
	}
}
