package weights

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/llmgw/internal/bounded"
	"github.com/llmgw/llmgw/weightsapi"
)

// DefaultHubURL is the Hugging Face hub; a mirror or an internal proxy that
// speaks its download protocol goes in the store's HubURL.
const DefaultHubURL = "https://huggingface.co"

// File is one file of a resolved model: where it is fetched from and what
// it must be.
type File struct {
	// Name is its path inside the model's directory.
	Name string `json:"name"`
	URL  string `json:"url"`
	// Size in bytes; -1 when the source did not say.
	Size int64 `json:"size"`
	// SHA256 in hex; empty when the source gave none (a hub file kept in
	// git rather than LFS: the size is checked).
	SHA256 string `json:"sha256,omitempty"`
}

// resolved is what a source resolves to before anything is fetched.
type resolved struct {
	Commit string // the hub commit every file is fetched at; "" for URLs
	Files  []File
}

// HTTPError is an answer the source refused with, named as the hub names
// it (its X-Error-Code) where it does.
type HTTPError struct {
	URL    string
	Status int
	Code   string // X-Error-Code: RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo…
	Msg    string
}

func (e *HTTPError) Error() string {
	s := fmt.Sprintf("%s: %d %s", e.URL, e.Status, http.StatusText(e.Status))
	if e.Code != "" {
		s += " (" + e.Code + ")"
	}
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	switch {
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		s += "; a gated or private repository needs a token (the task's hub token from Nomad Variables)"
	case e.Code == "RevisionNotFound":
		s += "; the revision does not exist (any more)"
	}
	return s
}

// Permanent reports whether asking again cannot help: the source refused
// the request itself (4xx but 408 and 429).
func (e *HTTPError) Permanent() bool {
	return e.Status >= 400 && e.Status < 500 && e.Status != http.StatusRequestTimeout && e.Status != http.StatusTooManyRequests
}

func httpError(resp *http.Response) error {
	e := &HTTPError{URL: resp.Request.URL.Redacted(), Status: resp.StatusCode, Code: resp.Header.Get("X-Error-Code"),
		Msg: resp.Header.Get("X-Error-Message")}
	if e.Msg == "" {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var j struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &j) == nil && j.Error != "" {
			e.Msg = j.Error
		}
	}
	if len(e.Msg) > 300 {
		e.Msg = e.Msg[:300] + "…"
	}
	return e
}

var hexCommitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// resolveHub finds the commit h's revision names and the files it needs.
// Exact file names are asked with HEAD on the hub's resolve URL (the
// headers huggingface_hub's get_hf_file_metadata reads: X-Repo-Commit,
// X-Linked-Etag or ETag, X-Linked-Size or Content-Length; a redirect is
// not followed, its headers are the file's); patterns are matched against
// the model-info API's file list (api/models/<repo>/revision/<rev>?blobs=true).
func (c *client) resolveHub(ctx context.Context, h Hub) (resolved, error) {
	exact := true
	for _, f := range h.Files {
		if strings.ContainsAny(f, `*?[\`) {
			exact = false
		}
	}
	if !exact {
		return c.resolveHubList(ctx, h)
	}
	var r resolved
	for _, name := range h.Files {
		u := c.hubURL(h.Repo, h.Rev(), name)
		req, err := c.request(ctx, http.MethodHead, u)
		if err != nil {
			return r, err
		}
		req.Header.Set("Accept-Encoding", "identity")
		resp, err := c.noRedirect.Do(req)
		if err != nil {
			return r, fmt.Errorf("%s: %w", redact(u), err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode >= 400 {
			return r, httpError(resp)
		}
		if resp.StatusCode >= 300 && resp.Header.Get("X-Repo-Commit") == "" {
			// A relative redirect (a renamed repository) carries no
			// file headers: the hub's client follows those.
			return r, fmt.Errorf("%s: %d redirect to %q without the file's headers (a renamed repository? name the new one)",
				redact(u), resp.StatusCode, resp.Header.Get("Location"))
		}
		commit := resp.Header.Get("X-Repo-Commit")
		if !hexCommitRE.MatchString(commit) {
			return r, fmt.Errorf("%s: X-Repo-Commit %q is not a commit (is %s a hub?)", redact(u), commit, c.base)
		}
		if r.Commit != "" && r.Commit != commit {
			return r, fmt.Errorf("%s: the revision moved from %s to %s while its files were listed; try again", h.Repo, r.Commit, commit)
		}
		r.Commit = commit
		etag := resp.Header.Get("X-Linked-Etag")
		if etag == "" {
			etag = resp.Header.Get("ETag")
		}
		etag = strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
		size := int64(-1)
		if s := resp.Header.Get("X-Linked-Size"); s != "" {
			size, err = strconv.ParseInt(s, 10, 64)
		} else if s := resp.Header.Get("Content-Length"); s != "" {
			size, err = strconv.ParseInt(s, 10, 64)
		}
		if err != nil || size < -1 {
			return r, fmt.Errorf("%s: size header: %w", redact(u), err)
		}
		f := File{Name: name, Size: size}
		if weightsapi.IsSHA256(etag) {
			f.SHA256 = etag
		}
		r.Files = append(r.Files, f)
	}
	for i := range r.Files {
		r.Files[i].URL = c.hubURL(h.Repo, r.Commit, r.Files[i].Name)
	}
	return r, nil
}

// maxInfoBytes bounds the model-info answer (a repository of many
// thousands of files is some megabytes).
const maxInfoBytes = 16 << 20

func (c *client) resolveHubList(ctx context.Context, h Hub) (resolved, error) {
	var r resolved
	ctx, cancel := context.WithTimeout(ctx, c.stall)
	defer cancel()
	u := c.base + "/api/models/" + h.Repo + "/revision/" + url.PathEscape(h.Rev()) + "?blobs=true"
	req, err := c.request(ctx, http.MethodGet, u)
	if err != nil {
		return r, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return r, fmt.Errorf("%s: %w", redact(u), err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return r, httpError(resp)
	}
	body, err := bounded.ReadAll(resp.Body, maxInfoBytes)
	if err != nil {
		return r, fmt.Errorf("%s: %w", redact(u), err)
	}
	var info struct {
		SHA      string `json:"sha"`
		Siblings []struct {
			Name string `json:"rfilename"`
			Size *int64 `json:"size"`
			LFS  *struct {
				SHA256 string `json:"sha256"`
				Size   int64  `json:"size"`
			} `json:"lfs"`
		} `json:"siblings"`
	}
	if err := json.Unmarshal(body, &info); err != nil {
		return r, fmt.Errorf("%s: %w", redact(u), err)
	}
	if !hexCommitRE.MatchString(info.SHA) {
		return r, fmt.Errorf("%s: sha %q is not a commit", redact(u), info.SHA)
	}
	r.Commit = info.SHA
	for _, pat := range h.Files {
		n := 0
		for _, s := range info.Siblings {
			if ok, _ := path.Match(pat, s.Name); !ok || weightsapi.CheckRelPath(s.Name) != nil {
				continue
			}
			n++
			f := File{Name: s.Name, URL: c.hubURL(h.Repo, r.Commit, s.Name), Size: -1}
			if s.Size != nil {
				f.Size = *s.Size
			}
			if s.LFS != nil {
				f.Size = s.LFS.Size
				if weightsapi.IsSHA256(s.LFS.SHA256) {
					f.SHA256 = s.LFS.SHA256
				}
			}
			if !containsFile(r.Files, f.Name) {
				r.Files = append(r.Files, f)
			}
		}
		if n == 0 {
			return r, permanent{fmt.Errorf("weights.hub.files: %q matches no file of %s at %s", pat, h.Repo, h.Rev())}
		}
	}
	return r, nil
}

func containsFile(fs []File, name string) bool {
	for _, f := range fs {
		if f.Name == name {
			return true
		}
	}
	return false
}

// resolveURLs asks each URL's size with HEAD where the source did not say.
func (c *client) resolveURLs(ctx context.Context, us []URL) (resolved, error) {
	var r resolved
	for _, u := range us {
		name, err := u.FileName()
		if err != nil {
			return r, err
		}
		f := File{Name: name, URL: u.URL, Size: -1, SHA256: u.SHA256}
		hctx, cancel := context.WithTimeout(ctx, c.stall)
		defer cancel()
		if u.Size > 0 {
			f.Size = u.Size
		} else if req, err := c.request(hctx, http.MethodHead, u.URL); err == nil {
			req.Header.Set("Accept-Encoding", "identity")
			if resp, err := c.http.Do(req); err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode >= 400 {
					return r, httpError(resp)
				}
				if resp.ContentLength >= 0 {
					f.Size = resp.ContentLength
				}
			}
		}
		r.Files = append(r.Files, f)
	}
	return r, nil
}

func (c *client) hubURL(repo, revision, name string) string {
	segs := strings.Split(name, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return c.base + "/" + repo + "/resolve/" + url.PathEscape(revision) + "/" + strings.Join(segs, "/")
}

// client is the HTTP side of fetching: the hub's base URL, the token for
// gated repositories, and two clients (one that follows redirects, as a
// download must to the hub's CDN, one that does not, for HEAD).
type client struct {
	base       string
	token      string
	http       *http.Client
	noRedirect *http.Client
	stall      time.Duration
}

func newClient(base, token string, transport http.RoundTripper, stall time.Duration) *client {
	base = strings.TrimRight(base, "/")
	if base == "" {
		base = DefaultHubURL
	}
	c := &client{base: base, token: token}
	// A token goes only to the hub's own host: a redirect to a CDN
	// (another host) is followed without it, as the hub's client does.
	baseHost := ""
	if u, err := url.Parse(base); err == nil {
		baseHost = u.Host
	}
	c.http = &http.Client{Transport: transport, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		if req.URL.Host != baseHost {
			req.Header.Del("Authorization")
		}
		return nil
	}}
	// HEAD and the model-info list are small: the whole request within
	// stall, as a download's every read is (get).
	c.noRedirect = &http.Client{Transport: transport, Timeout: stall, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	c.stall = stall
	return c
}

func (c *client) request(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "llmgw-weights")
	if c.token != "" && strings.HasPrefix(u, c.base+"/") {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// redact drops a URL's user info and query (signed CDN URLs carry
// credentials there) for logs and errors.
func redact(u string) string {
	pu, err := url.Parse(u)
	if err != nil {
		return "(a URL that does not parse)"
	}
	pu.User = nil
	pu.RawQuery = ""
	return pu.String()
}
