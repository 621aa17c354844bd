// Package weightsapi is what the controller, the planner and the node's
// model store (package weights) share about a model's weights: where they
// come from (Source), checked (Validate), and the one name every node and
// the controller give them (Key). Pure: no I/O.
package weightsapi

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Source says where a model's weights come from: a Hugging Face repository
// at a revision (Hub), plain HTTP(S) URLs, or a path already on every node.
// Exactly one is set.
type Source struct {
	Hub  *Hub   `json:"hub,omitempty"`
	URLs []URL  `json:"urls,omitempty"`
	Path string `json:"path,omitempty"`
}

// Hub is a repository on a Hugging Face hub (or a mirror that speaks its
// download protocol) and the files of it the model needs.
type Hub struct {
	// Repo is the repository, "org/name".
	Repo string `json:"repo"`
	// Revision is a branch, tag or commit; "main" when empty. The store
	// resolves it to a commit once and fetches every file at that commit.
	Revision string `json:"revision,omitempty"`
	// Files are the files the engine needs: exact paths, or patterns as
	// path.Match takes them ("*.safetensors"). At least one.
	Files []string `json:"files"`
}

// URL is one file fetched over plain HTTP(S).
type URL struct {
	URL string `json:"url"`
	// Name is the file's name in the model's directory; the URL path's
	// last element when empty.
	Name string `json:"name,omitempty"`
	// SHA256 is the file's sha256 in hex; the file is refused when it
	// differs. Empty: only the size is checked (when known).
	SHA256 string `json:"sha256,omitempty"`
	// Size in bytes, when known: checked, and counted against the store's
	// budget before the fetch.
	Size int64 `json:"size,omitempty"`
}

// The node attributes the driver's fingerprint gives each node from its
// store: AttrPrefix+key = the bytes of each model it holds whole, and
// AttrFetchRate = the bytes a second it fetches at (fetch_bytes_per_second
// where configured, else the rate of its latest fetch of 8 MiB or more).
const (
	AttrPrefix    = "driver.llmgw.weights."
	AttrFetchRate = "driver.llmgw.store.fetch_bytes_per_second"
)

// IsSHA256 reports whether s is a sha256 as the sources give it: 64
// lower-case hex digits.
func IsSHA256(s string) bool { return sha256RE.MatchString(s) }

var (
	repoRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$`)
	revisionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$`)
	sha256RE   = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Validate checks s as the catalog gives it, naming the field at fault.
func (s Source) Validate() error {
	n := 0
	if s.Hub != nil {
		n++
	}
	if len(s.URLs) > 0 {
		n++
	}
	if s.Path != "" {
		n++
	}
	if n != 1 {
		return errors.New("weights: set exactly one of hub, urls and path")
	}
	switch {
	case s.Hub != nil:
		return s.Hub.validate()
	case len(s.URLs) > 0:
		names := map[string]bool{}
		for i, u := range s.URLs {
			name, err := u.FileName()
			if err != nil {
				return fmt.Errorf("weights.urls[%d]: %w", i, err)
			}
			if names[name] {
				return fmt.Errorf("weights.urls[%d]: a second file named %q", i, name)
			}
			names[name] = true
			if u.SHA256 != "" && !sha256RE.MatchString(u.SHA256) {
				return fmt.Errorf("weights.urls[%d].sha256: %q is not 64 lower-case hex digits", i, u.SHA256)
			}
			if u.Size < 0 {
				return fmt.Errorf("weights.urls[%d].size: %d is negative", i, u.Size)
			}
		}
	default:
		if !path.IsAbs(s.Path) || path.Clean(s.Path) != s.Path {
			return fmt.Errorf("weights.path: %q is not a clean absolute path", s.Path)
		}
	}
	return nil
}

func (h Hub) validate() error {
	if !repoRE.MatchString(h.Repo) || strings.Contains(h.Repo, "..") {
		return fmt.Errorf("weights.hub.repo: %q is not a repository id (org/name)", h.Repo)
	}
	if h.Revision != "" && (!revisionRE.MatchString(h.Revision) || strings.Contains(h.Revision, "..")) {
		return fmt.Errorf("weights.hub.revision: %q is not a branch, tag or commit", h.Revision)
	}
	if len(h.Files) == 0 {
		return errors.New("weights.hub.files: name at least one file or pattern (a GGUF file, or \"*.safetensors\" and the configs)")
	}
	for i, f := range h.Files {
		if err := CheckRelPath(f); err != nil {
			return fmt.Errorf("weights.hub.files[%d]: %w", i, err)
		}
		if _, err := path.Match(f, ""); err != nil {
			return fmt.Errorf("weights.hub.files[%d]: %q: %w", i, f, err)
		}
	}
	return nil
}

// CheckRelPath refuses a file path that could leave the model's directory.
func CheckRelPath(p string) error {
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == "." || strings.HasPrefix(p, "../") || p == ".." ||
		strings.ContainsAny(p, "\\\x00\n\r") {
		return fmt.Errorf("%q is not a clean relative path inside the repository", p)
	}
	return nil
}

func (u URL) FileName() (string, error) {
	pu, err := url.Parse(u.URL)
	if err != nil || (pu.Scheme != "https" && pu.Scheme != "http") || pu.Host == "" {
		return "", fmt.Errorf("url: %q is not an http(s) URL", u.URL)
	}
	name := u.Name
	if name == "" {
		name = path.Base(pu.Path)
	}
	if strings.Contains(name, "/") || CheckRelPath(name) != nil || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("name: %q is not a plain file name (set name)", name)
	}
	return name, nil
}

// Rev is the hub revision asked for: "main" when unset.
func (h Hub) Rev() string {
	if h.Revision == "" {
		return "main"
	}
	return h.Revision
}

// Key is the store's name for the weights s names, the same on every node
// and in the controller: readable (the repository and revision, or "urls")
// and unique (a hash of everything that says which bytes these are). A
// path source has no key: nothing is fetched.
func (s Source) Key() string {
	h := sha256.New()
	var readable string
	switch {
	case s.Hub != nil:
		files := slices.Clone(s.Hub.Files)
		slices.Sort(files)
		fmt.Fprintf(h, "hub\x00%s\x00%s", s.Hub.Repo, s.Hub.Rev())
		for _, f := range files {
			fmt.Fprintf(h, "\x00%s", f)
		}
		readable = strings.ReplaceAll(s.Hub.Repo, "/", "--") + "--" + s.Hub.Rev()
	case len(s.URLs) > 0:
		h.Write([]byte("urls"))
		for _, u := range s.URLs {
			name, _ := u.FileName()
			fmt.Fprintf(h, "\x00%s\x00%s\x00%s\x00%d", u.URL, name, u.SHA256, u.Size)
		}
		readable = "urls"
	default:
		return ""
	}
	return Sanitize(readable) + "-" + hex.EncodeToString(h.Sum(nil))[:10]
}

// Sanitize keeps what a Nomad attribute name, a file name and a log line
// all take: lower-case letters, digits, '-' and '_'.
func Sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > 120 {
		out = out[:120]
	}
	return out
}

// String names the source for events and errors.
func (s Source) String() string {
	switch {
	case s.Hub != nil:
		return fmt.Sprintf("%s@%s (%s)", s.Hub.Repo, s.Hub.Rev(), strings.Join(s.Hub.Files, ", "))
	case len(s.URLs) > 0:
		if len(s.URLs) == 1 {
			return s.URLs[0].URL
		}
		return fmt.Sprintf("%s and %d more URLs", s.URLs[0].URL, len(s.URLs)-1)
	default:
		return s.Path
	}
}

// AdapterDir is the directory, in a replica's task directory, where the
// driver links each LoRA adapter the node's store fetched, under the
// adapter's name: the engine loads <task dir>/AdapterDir/<name> and lists
// it by that path, so the controller and the gateways know the adapter by
// AdapterLink(name), the path's tail, whatever node and allocation it is
// on (an adapter the catalog gives as a path is known by that path).
const AdapterDir = "llmgw-adapters"

// AdapterLink is where the driver links adapter name's files, relative to
// the replica's task directory: AdapterDir/name. The name must pass
// CheckAdapterLinkName.
func AdapterLink(name string) string { return AdapterDir + "/" + name }

// CheckAdapterLinkName refuses the name of an adapter the store fetches
// that cannot be its link's file name in AdapterDir.
func CheckAdapterLinkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") {
		return fmt.Errorf("%q cannot name the adapter's link in the task directory (%s/NAME): not . or .., and no '/' or '\\'", name, AdapterDir)
	}
	return nil
}
