package weights_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/weights"
)

// A hub that lies or attacks: the store refuses, names why, writes
// nothing outside itself and publishes nothing partial.
func TestHostileHub(t *testing.T) {
	good := []byte("good weights")
	sum := sha256.Sum256(good)
	goodSum := hex.EncodeToString(sum[:])
	const commit = "0123456789abcdef0123456789abcdef01234567"
	mode := ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/api/models/"):
			switch mode {
			case "huge":
				_, _ = fmt.Fprintf(w, `{"sha":%q,"siblings":[{"rfilename":"%s"}]}`, commit, strings.Repeat("a", 17<<20))
			case "deep":
				_, _ = w.Write([]byte(strings.Repeat("[", 200000)))
			default: // escaping names among a good one
				_, _ = fmt.Fprintf(w, `{"sha":%q,"siblings":[{"rfilename":"../evil.gguf","size":1},{"rfilename":"/etc/evil.gguf","size":1},{"rfilename":"ok.gguf","lfs":{"sha256":%q,"size":%d}}]}`,
					commit, goodSum, len(good))
			}
		case r.Method == http.MethodHead:
			c := commit
			if mode == "badcommit" {
				c = "../../../../tmp"
			}
			w.Header().Set("X-Repo-Commit", c)
			w.Header().Set("X-Linked-Etag", `"`+goodSum+`"`)
			w.Header().Set("X-Linked-Size", fmt.Sprint(len(good)))
		default:
			if mode == "long" {
				_, _ = w.Write(append(append([]byte{}, good...), strings.Repeat("x", 1<<20)...)) // more than it said
				return
			}
			_, _ = w.Write(good)
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	s, err := weights.Open(weights.Config{Dir: dir, HubURL: srv.URL, RetryWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	pattern := weights.Source{Hub: &weights.Hub{Repo: "org/m", Files: []string{"*.gguf"}}}
	exact := weights.Source{Hub: &weights.Hub{Repo: "org/m", Files: []string{"ok.gguf"}}}
	for _, c := range []struct {
		mode string
		src  weights.Source
		want string
	}{
		{"huge", pattern, "larger than"},
		{"deep", pattern, "/api/models/org/m/revision/main: "},
		{"badcommit", exact, "is not a commit"},
		{"long", exact, "more than the 12 bytes the source said"},
	} {
		mode = c.mode
		if _, err := s.Ensure(t.Context(), c.src, "", nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.mode, err, c.want)
		}
		if ms, _ := s.Models(); len(ms) != 0 {
			t.Errorf("%s: the store holds %+v", c.mode, ms)
		}
	}
	// Names that would leave the model's directory are left out; the good
	// file is fetched.
	mode = ""
	m, err := s.Ensure(t.Context(), pattern, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 1 || m.Files[0].Name != "ok.gguf" {
		t.Errorf("files %+v, want ok.gguf alone", m.Files)
	}
	for _, p := range []string{filepath.Join(filepath.Dir(dir), "evil.gguf"), "/etc/evil.gguf", filepath.Join(m.Dir, "..", "evil.gguf")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was written", p)
		}
	}
}
