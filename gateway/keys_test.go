package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/internal/testing/hostile"
)

var (
	hashA = HashKey("sk-a")
	hashB = HashKey("sk-b")
)

func TestHashKey(t *testing.T) {
	// printf sk-a | sha256sum
	if got, want := HashKey("sk-a"), "sha256:a4a6d307ad00fa67176e1099fdbc4f4a09bb527a7f24718a5030f2f173d11f7f"; got != want {
		t.Fatalf("HashKey = %q, want %q", got, want)
	}
}

func TestParseKeys(t *testing.T) {
	src := `
key "team-a" {
  hash                = "` + hashA + `"
  models              = ["m1", "m2"]
  requests_per_minute = 60
  tokens_per_minute   = 1000
  max_concurrency     = 2
}

key "team-b" {
  hash           = "` + hashB + `"
  reserve_tokens = 0
}
`
	ks, err := ParseKeys("keys.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	a, b := ks.lookup("sk-a"), ks.lookup("sk-b")
	if a == nil || b == nil || ks.lookup("sk-c") != nil || ks.lookup(hashA) != nil {
		t.Fatalf("lookup: a %v b %v", a, b)
	}
	if diff := cmp.Diff(&Key{Name: "team-a", Models: map[string]bool{"m1": true, "m2": true}, RequestsPerMinute: 60,
		TokensPerMinute: 1000, MaxConcurrency: 2, ReserveTokens: DefaultReserveTokens, At: "keys.hcl:2"}, a,
		cmp.AllowUnexported(Key{}), cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".lim" }, cmp.Ignore())); diff != "" {
		t.Errorf("team-a (-want +got):\n%s", diff)
	}
	if b.Models != nil || !b.Allows("anything") || b.ReserveTokens != 0 || b.RequestsPerMinute != 0 {
		t.Errorf("team-b: %+v", b)
	}
	if a.Allows("m3") || !a.Allows("m2") {
		t.Error("team-a's allowlist")
	}
	if diff := cmp.Diff([]string{`keys.hcl:2: key "team-a": model "m2" is not in the catalog`},
		ks.UnknownModels(func(m string) bool { return m == "m1" })); diff != "" {
		t.Errorf("unknown models (-want +got):\n%s", diff)
	}
}

func TestParseKeysErrors(t *testing.T) {
	for _, tt := range []struct {
		name, src string
		want      []string
	}{
		{"syntax", "key \"a\" {\n  hash = \n}\n", []string{"keys.hcl:2: Invalid expression"}},
		{"unknown attribute", "key \"a\" {\n  hash = \"" + hashA + "\"\n  rpm = 1\n}\n", []string{"keys.hcl:3: Unsupported argument"}},
		{"no hash", "\nkey \"a\" {\n}\n", []string{"keys.hcl:2: Missing required argument"}},
		{"secret for a hash", "key \"a\" {\n  hash = \"sk-a\"\n}\n", []string{`keys.hcl:2: key "a": hash: want "sha256:" and 64 lower-case hex digits`}},
		{"short hash", "key \"a\" {\n  hash = \"sha256:abcd\"\n}\n", []string{`keys.hcl:2: key "a": hash: want`}},
		{"upper-case hash", "key \"a\" {\n  hash = \"" + strings.ToUpper(hashA[7:]) + "\"\n}\n", []string{`keys.hcl:2: key "a": hash: want`}},
		{"bad name", "key \"a b\" {\n  hash = \"" + hashA + "\"\n}\n", []string{`keys.hcl:1: key "a b": a key's name is`}},
		{"twice", "key \"a\" {\n  hash = \"" + hashA + "\"\n}\nkey \"a\" {\n  hash = \"" + hashB + "\"\n}\n",
			[]string{`keys.hcl:4: key "a": declared twice (first at line 1)`}},
		{"same secret", "key \"a\" {\n  hash = \"" + hashA + "\"\n}\nkey \"b\" {\n  hash = \"" + hashA + "\"\n}\n",
			[]string{`keys.hcl:5: key "b": hash: the same secret as key "a"`}},
		{"zero rpm", "key \"a\" {\n  hash = \"" + hashA + "\"\n  requests_per_minute = 0\n}\n",
			[]string{`keys.hcl:3: key "a": requests_per_minute: 0: want at least 1`}},
		{"negative tpm", "key \"a\" {\n  hash = \"" + hashA + "\"\n\n  tokens_per_minute = -5\n}\n",
			[]string{`keys.hcl:4: key "a": tokens_per_minute: -5: want at least 1`}},
		{"zero concurrency", "key \"a\" {\n  hash = \"" + hashA + "\"\n  max_concurrency = 0\n}\n",
			[]string{`keys.hcl:3: key "a": max_concurrency: 0: want at least 1`}},
		{"negative reserve", "key \"a\" {\n  hash = \"" + hashA + "\"\n  reserve_tokens = -1\n}\n",
			[]string{`keys.hcl:3: key "a": reserve_tokens: -1: want 0 or more`}},
		{"limit of the wrong type", "key \"a\" {\n  hash = \"" + hashA + "\"\n  max_concurrency = \"many\"\n}\n",
			[]string{`keys.hcl:3: max_concurrency: `}},
		{"empty allowlist", "key \"a\" {\n  hash = \"" + hashA + "\"\n  models = []\n}\n",
			[]string{`keys.hcl:3: key "a": models: empty`}},
		{"bad model names", "key \"a\" {\n  hash = \"" + hashA + "\"\n  models = [\"m1\", \"\", \"a b\", \"m1\"]\n}\n",
			[]string{`keys.hcl:3: key "a": models[1]: "" is not a model name`, `keys.hcl:3: key "a": models[2]: "a b" is not a model name`,
				`keys.hcl:3: key "a": models[3]: "m1" listed twice`}},
		{"every problem at once", "key \"a\" {\n  hash = \"x\"\n  requests_per_minute = -1\n}\n",
			[]string{`keys.hcl:2: key "a": hash`, `keys.hcl:3: key "a": requests_per_minute`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ks, err := ParseKeys("keys.hcl", []byte(tt.src))
			if err == nil {
				t.Fatalf("no error; keys %v", ks.Keys())
			}
			if ks != nil {
				t.Error("a set with an error")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("errors:\n%v\nwant %d", err, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(lines[i], w) {
					t.Errorf("error %d = %q, want prefix %q", i, lines[i], w)
				}
			}
		})
	}
}

// TestFileKeysReload: the file is read again when it changes and on
// Reload; contents that fail keep nothing from publishing a set, so the
// gateway keeps the keys in force.
func TestFileKeysReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.hcl")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("key \"a\" {\n  hash = \"" + hashA + "\"\n}\n")
	type pub struct {
		ks  *KeySet
		err error
	}
	ch := make(chan pub, 8)
	reload := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	src := &FileKeys{Path: path, Interval: time.Hour, Reload: reload}
	go func() { _ = src.Run(ctx, func(ks *KeySet, err error) { ch <- pub{ks, err} }) }()
	p := <-ch
	if p.err != nil || p.ks.lookup("sk-a") == nil {
		t.Fatalf("first read: %v", p.err)
	}
	write("key \"a\" {\n  hash = \"" + hashA + "\"\n  max_concurrency = 0\n}\n")
	reload <- struct{}{}
	p = <-ch
	if p.ks != nil || p.err == nil || !strings.Contains(p.err.Error(), path+":3: ") {
		t.Fatalf("bad file: set %v, error %v", p.ks, p.err)
	}
	write("key \"b\" {\n  hash = \"" + hashB + "\"\n}\n")
	reload <- struct{}{}
	p = <-ch
	if p.err != nil || p.ks.lookup("sk-b") == nil || p.ks.lookup("sk-a") != nil {
		t.Fatalf("good file again: %v", p.err)
	}
}

// The example key file parses, and its hashes are of the secrets its
// comments name.
func TestExampleKeyFile(t *testing.T) {
	path := filepath.Join("..", "jobs", "examples", "gateway-keys.hcl")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := ParseKeys(path, src)
	if err != nil {
		t.Fatal(err)
	}
	if ks.lookup("sk-example-team-a") == nil || ks.lookup("sk-example-batch") == nil || ks.Len() != 2 {
		t.Errorf("keys %v", ks.Keys())
	}
}

// FuzzParseKeys: any input parses or is refused with errors at
// keys.hcl:LINE; never a panic, never a set and an error.
func FuzzParseKeys(f *testing.F) {
	f.Add("key \"a\" {\n  hash = \"" + hashA + "\"\n  models = [\"m\"]\n  max_concurrency = 2\n}\n")
	f.Add("key \"a\" {\n  hash = \"x\"\n  requests_per_minute = 0\n}\n")
	for _, b := range hostile.HCLSeeds() {
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, src string) {
		ks, err := ParseKeys("keys.hcl", []byte(src))
		if err != nil {
			if ks != nil {
				t.Fatal("a set and an error")
			}
			for l := range strings.SplitSeq(err.Error(), "\n") {
				if !strings.HasPrefix(l, "keys.hcl:") {
					t.Fatalf("error line %q does not name keys.hcl:LINE", l)
				}
			}
			return
		}
		for _, k := range ks.Keys() {
			if k.Name == "" || k.RequestsPerMinute < 0 || k.TokensPerMinute < 0 || k.MaxConcurrency < 0 || (k.Models != nil && len(k.Models) == 0) {
				t.Fatalf("key %+v passed", k)
			}
		}
	})
}

// The key file example in docs/gateway.md parses, and means what its
// comments say.
func TestDocExampleKeyFile(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "gateway.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```hcl\nkey \"team-a\" {")
	src, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/gateway.md has no key file example")
	}
	ks, err := ParseKeys("gateway.md", []byte("key \"team-a\" {"+src))
	if err != nil {
		t.Fatal(err)
	}
	k := ks.lookup("test")
	if k == nil || !k.Allows("bge-m3") || k.Allows("other") || k.RequestsPerMinute != 600 || k.ReserveTokens != 256 {
		t.Errorf("key %+v", k)
	}
}
