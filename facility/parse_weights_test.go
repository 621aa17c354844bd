package facility

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/weightsapi"
)

const sumA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// weightsModel is a catalog of one model "m" whose block has the lines
// given before its profile.
func weightsModel(lines string) string {
	return "model \"m\" {\n" + lines + "  profile \"p\" {\n    engine = \"vllm\"\n    gpu    = \"H\"\n  }\n}\n"
}

// TestParseCatalogWeights: each kind of weights source, with the defaults
// filled in, in both syntaxes.
func TestParseCatalogWeights(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file, src string
		want            *weightsapi.Source
		bytes           int64
		spares          int
	}{
		{
			"hub: the model's file by default", "c.hcl",
			weightsModel("  source = \"Qwen/Qwen2.5-0.5B-Instruct-GGUF\"\n  file = \"qwen2.5-0.5b-instruct-q4_k_m.gguf\"\n  weights {}\n"),
			&weightsapi.Source{Hub: &weightsapi.Hub{Repo: "Qwen/Qwen2.5-0.5B-Instruct-GGUF", Files: []string{"qwen2.5-0.5b-instruct-q4_k_m.gguf"}}}, 0, 0,
		},
		{
			"hub: revision, files, bytes, warm_spares", "c.hcl",
			weightsModel("  source = \"org/big\"\n  warm_spares = 2\n  weights {\n    revision = \"v1.2\"\n    files = [\"*.safetensors\", \"config.json\"]\n    bytes = 16100000000\n  }\n"),
			&weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/big", Revision: "v1.2", Files: []string{"*.safetensors", "config.json"}}}, 16100000000, 2,
		},
		{
			"urls with a sha256", "c.hcl",
			weightsModel("  weights {\n    urls = [\"https://models.example/a/m.gguf\", \"https://models.example/a/tok.json\"]\n    sha256 = { \"m.gguf\" = \"" + sumA + "\" }\n  }\n  warm_spares = 64\n"),
			&weightsapi.Source{URLs: []weightsapi.URL{{URL: "https://models.example/a/m.gguf", SHA256: sumA}, {URL: "https://models.example/a/tok.json"}}}, 0, 64,
		},
		{
			"path", "c.hcl",
			weightsModel("  source = \"/models/m\"\n  weights {\n    path = \"/models/m\"\n  }\n"),
			&weightsapi.Source{Path: "/models/m"}, 0, 0,
		},
		{
			"no weights block", "c.hcl", weightsModel("  source = \"org/m\"\n"), nil, 0, 0,
		},
		{
			"JSON: hub", "c.json",
			`{"model": {"m": {"source": "org/big", "warm_spares": 1, "weights": {"revision": "main", "files": ["*.safetensors"], "bytes": 5000000000},
  "profile": {"p": {"engine": "vllm", "gpu": "H"}}}}}`,
			&weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/big", Revision: "main", Files: []string{"*.safetensors"}}}, 5000000000, 1,
		},
		{
			"JSON: urls", "c.json",
			`{"model": {"m": {"file": "m.gguf", "weights": {"urls": ["https://h.example/m.gguf"], "sha256": {"m.gguf": "` + sumA + `"}},
  "profile": {"p": {"engine": "llamacpp", "gpu": "H"}}}}}`,
			&weightsapi.Source{URLs: []weightsapi.URL{{URL: "https://h.example/m.gguf", SHA256: sumA}}}, 0, 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cat, err := ParseCatalog(tt.file, []byte(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			m := cat.Models[0]
			if diff := cmp.Diff(tt.want, m.Weights); diff != "" {
				t.Errorf("weights (-want +got):\n%s", diff)
			}
			if m.WeightsBytes != tt.bytes || m.WarmSpares != tt.spares {
				t.Errorf("bytes %d, warm_spares %d; want %d, %d", m.WeightsBytes, m.WarmSpares, tt.bytes, tt.spares)
			}
		})
	}
}

// Every bad weights block or warm_spares is an error at the line of the
// field at fault, naming it as the catalog writes it.
func TestParseCatalogWeightsErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file, src string
		want            []string // every line of the error
	}{
		{"hub without a source", "c.hcl", weightsModel("  file = \"m.gguf\"\n  weights {\n    revision = \"main\"\n  }\n"),
			[]string{`c.hcl:3: model "m": weights: a hub repository's files need the model's source, the repository ("org/name"); or give urls or path`}},
		{"hub with neither files nor file", "c.hcl", weightsModel("  source = \"org/m\"\n  weights {}\n"),
			[]string{`c.hcl:3: model "m": weights: name the hub repository's files (files = ["*.safetensors", "config.json"]), or give the model's file`}},
		{"source not a repository", "c.hcl", weightsModel("  source = \"meta-llama\"\n  weights {\n    files = [\"*.safetensors\"]\n  }\n"),
			[]string{`c.hcl:2: model "m": source: "meta-llama" is not a repository id (org/name)`}},
		{"bad revision", "c.hcl", weightsModel("  source = \"org/m\"\n  weights {\n    files = [\"a\"]\n\n    revision = \"../x\"\n  }\n"),
			[]string{`c.hcl:6: model "m": weights.revision: "../x" is not a branch, tag or commit`}},
		{"a file outside the repository", "c.hcl", weightsModel("  source = \"org/m\"\n  weights {\n    files = [\"ok.json\", \"../etc/passwd\"]\n  }\n"),
			[]string{`c.hcl:4: model "m": weights.files[1]: "../etc/passwd" is not a clean relative path inside the repository`}},
		{"no files", "c.hcl", weightsModel("  source = \"org/m\"\n  weights {\n    files = []\n  }\n"),
			[]string{`c.hcl:4: model "m": weights.files: name at least one file or pattern (a GGUF file, or "*.safetensors" and the configs)`}},
		{"the model's file, by default, is bad", "c.hcl", weightsModel("  source = \"org/m\"\n  file = \"/abs/m.gguf\"\n  weights {}\n"),
			[]string{`c.hcl:3: model "m": file[0]: "/abs/m.gguf" is not a clean relative path inside the repository`}},
		{"urls and path", "c.hcl", weightsModel("  weights {\n    urls = [\"https://h.example/m.gguf\"]\n    path = \"/m\"\n  }\n"),
			[]string{`c.hcl:4: model "m": weights: urls and path are both given: give one (urls: files fetched over HTTP(S); path: the weights already on every node)`}},
		{"files with urls", "c.hcl", weightsModel("  weights {\n    urls = [\"https://h.example/m.gguf\"]\n    files = [\"m.gguf\"]\n  }\n"),
			[]string{`c.hcl:4: model "m": weights.files is for a hub repository (the model's source); with urls, leave it out`}},
		{"revision with a path", "c.hcl", weightsModel("  weights {\n    path = \"/m\"\n    revision = \"main\"\n  }\n"),
			[]string{`c.hcl:4: model "m": weights.revision is for a hub repository (the model's source); with path, leave it out`}},
		{"sha256 without urls", "c.hcl", weightsModel("  source = \"org/m\"\n  weights {\n    files = [\"a\"]\n    sha256 = { a = \"" + sumA + "\" }\n  }\n"),
			[]string{`c.hcl:5: model "m": weights.sha256 is only for urls (each file's sha256, keyed by its name)`}},
		{"sha256 of no file", "c.hcl", weightsModel("  weights {\n    urls = [\"https://h.example/m.gguf\"]\n    sha256 = { \"n.gguf\" = \"" + sumA + "\" }\n  }\n"),
			[]string{`c.hcl:4: model "m": weights.sha256: "n.gguf" is not the file name of any of urls (m.gguf)`}},
		{"sha256 not one", "c.hcl", weightsModel("  weights {\n    urls = [\"https://h.example/m.gguf\"]\n    sha256 = { \"m.gguf\" = \"ABC\" }\n  }\n"),
			[]string{`c.hcl:4: model "m": weights.sha256["m.gguf"]: "ABC" is not a sha256 (64 lower-case hex digits)`}},
		{"a URL that is not http", "c.hcl", weightsModel("  weights {\n\n    urls = [\"https://h.example/m.gguf\", \"ftp://h.example/n.gguf\"]\n  }\n"),
			[]string{`c.hcl:4: model "m": weights.urls[1]: url: "ftp://h.example/n.gguf" is not an http(s) URL`}},
		{"two URLs of one name", "c.hcl", weightsModel("  weights {\n    urls = [\"https://a.example/m.gguf\", \"https://b.example/m.gguf\"]\n  }\n"),
			[]string{`c.hcl:3: model "m": weights.urls[1]: a second file named "m.gguf"`}},
		{"no urls", "c.hcl", weightsModel("  weights {\n    urls = []\n  }\n"),
			[]string{`c.hcl:3: model "m": weights.urls: name at least one URL`}},
		{"a relative path", "c.hcl", weightsModel("  weights {\n    path = \"models/m\"\n  }\n"),
			[]string{`c.hcl:3: model "m": weights.path: "models/m" is not a clean absolute path`}},
		{"bytes of 0", "c.hcl", weightsModel("  source = \"org/m\"\n  file = \"m.gguf\"\n  weights {\n    bytes = 0\n  }\n"),
			[]string{`c.hcl:5: model "m": weights.bytes must be between 1 and 1125899906842624, got 0`}},
		{"bytes not a number", "c.hcl", weightsModel("  source = \"org/m\"\n  file = \"m.gguf\"\n  weights {\n    bytes = \"16 GB\"\n  }\n"),
			[]string{`c.hcl:5: bytes: Unsuitable value type: a number is required`}},
		{"two weights blocks", "c.hcl", weightsModel("  source = \"org/m\"\n  file = \"m.gguf\"\n  weights {}\n  weights {}\n"),
			[]string{`c.hcl:5: Duplicate weights block: Only one weights block is allowed. Another was defined at c.hcl:4,3-10.`}},
		{"an unknown field, with a hint", "c.hcl", weightsModel("  source = \"org/m\"\n  weights {\n    file = [\"a\"]\n  }\n"),
			[]string{`c.hcl:4: Unsupported argument: An argument named "file" is not expected here. Did you mean "files"?`,
				`c.hcl:3: model "m": weights: name the hub repository's files (files = ["*.safetensors", "config.json"]), or give the model's file`}},
		{"warm_spares without weights", "c.hcl", weightsModel("  source = \"org/m\"\n  warm_spares = 1\n"),
			[]string{`c.hcl:3: model "m": warm_spares needs a weights block: a spare keeps the model's weights fetched`}},
		{"warm_spares with a path", "c.hcl", weightsModel("  warm_spares = 2\n  weights {\n    path = \"/m\"\n  }\n"),
			[]string{`c.hcl:2: model "m": warm_spares: the weights are a path already on every node, nothing to keep warm`}},
		{"warm_spares too many", "c.hcl", weightsModel("  source = \"org/m\"\n  file = \"m.gguf\"\n  weights {}\n  warm_spares = 65\n"),
			[]string{`c.hcl:5: warm_spares must be between 0 and 64, got 65`}},
		{"warm_spares negative", "c.hcl", weightsModel("  source = \"org/m\"\n  file = \"m.gguf\"\n  weights {}\n  warm_spares = -1\n"),
			[]string{`c.hcl:5: warm_spares must not be negative, got -1`}},
		{"JSON: hub without a source", "c.json", "{\"model\": {\"m\": {\"file\": \"m.gguf\",\n  \"weights\": {\"revision\": \"main\"},\n  \"profile\": {\"p\": {\"engine\": \"vllm\", \"gpu\": \"H\"}}}}}",
			[]string{`c.json:2: model "m": weights: a hub repository's files need the model's source, the repository ("org/name"); or give urls or path`}},
		{"JSON: sha256 not one", "c.json", "{\"model\": {\"m\": {\"weights\": {\"urls\": [\"https://h.example/m.gguf\"],\n  \"sha256\": {\"m.gguf\": \"x\"}},\n  \"profile\": {\"p\": {\"engine\": \"vllm\", \"gpu\": \"H\"}}}}}",
			[]string{`c.json:2: model "m": weights.sha256["m.gguf"]: "x" is not a sha256 (64 lower-case hex digits)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseCatalog(tt.file, []byte(tt.src))
			if err == nil {
				t.Fatalf("got no error, want %q", tt.want)
			}
			checkErrorLines(t, tt.file, err)
			if diff := cmp.Diff(tt.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

// Validate checks the weights of a catalog built in code as the parser
// does, naming the model.
func TestValidateWeights(t *testing.T) {
	t.Parallel()
	prof := []Profile{{Name: "p", Engine: "vllm", GPU: "H", GPUs: 1, Nodes: 1}}
	hub := &weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/m", Files: []string{"a"}}}
	for _, tt := range []struct {
		name string
		m    Model
		want string
	}{
		{"hub", Model{Name: "m", Weights: hub, WeightsBytes: 5, WarmSpares: 3, Profiles: prof}, ""},
		{"bad repository", Model{Name: "m", Weights: &weightsapi.Source{Hub: &weightsapi.Hub{Repo: "x", Files: []string{"a"}}}, Profiles: prof, Pos: Pos{"x.hcl", 2}},
			`x.hcl:2: model "m": weights.hub.repo: "x" is not a repository id (org/name)`},
		{"negative bytes", Model{Name: "m", Weights: hub, WeightsBytes: -1, Profiles: prof, Pos: Pos{"x.hcl", 2}},
			`x.hcl:2: model "m": weights bytes must be between 0 and 1125899906842624, got -1`},
		{"spares without weights", Model{Name: "m", WarmSpares: 1, Profiles: prof, Pos: Pos{"x.hcl", 2}},
			`x.hcl:2: model "m": warm_spares needs weights a node fetches (a hub repository or urls)`},
		{"spares of a path", Model{Name: "m", Weights: &weightsapi.Source{Path: "/m"}, WarmSpares: 1, Profiles: prof, Pos: Pos{"x.hcl", 2}},
			`x.hcl:2: model "m": warm_spares needs weights a node fetches (a hub repository or urls)`},
		{"too many spares", Model{Name: "m", Weights: hub, WarmSpares: 65, Profiles: prof, Pos: Pos{"x.hcl", 2}},
			`x.hcl:2: model "m": warm_spares must be between 0 and 64, got 65`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if err := (Catalog{Models: []Model{tt.m}}).Validate(); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// A fleet node may say which weights its store holds and how fast it
// fetches, in either syntax, for `llmgw plan`.
func TestParseFleetWeights(t *testing.T) {
	t.Parallel()
	want := []Node{
		{Name: "a", Pool: DefaultPool, Location: Location{Rack: "k1"}, Pos: Pos{"f", 1},
			Weights: map[string]int64{"org--m--main-0123456789": 16100000000, "urls-abcdef0123": 5}, FetchBytesPerSecond: 250e6},
		{Name: "b", Pool: DefaultPool, Location: Location{Rack: "k1"}, Pos: Pos{"f", 0}},
	}
	for _, tt := range []struct{ file, src string }{
		{"f.hcl", `node "a" {
  rack = "k1"
  weights = {
    "org--m--main-0123456789" = 16100000000
    "urls-abcdef0123" = 5
  }
  fetch_bytes_per_second = 250000000
}
node "b" {
  rack = "k1"
}
`},
		{"f.json", `{"node": {"a": {"rack": "k1", "weights": {"org--m--main-0123456789": 16100000000, "urls-abcdef0123": 5},
  "fetch_bytes_per_second": 2.5e8},
"b": {"rack": "k1"}}}`},
	} {
		t.Run(tt.file, func(t *testing.T) {
			fleet, err := ParseFleet(tt.file, []byte(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			w := append([]Node(nil), want...)
			w[0].Pos = Pos{tt.file, 1}
			w[1].Pos = fleet.Nodes[1].Pos
			if diff := cmp.Diff(w, fleet.Nodes); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseFleetWeightsErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, file, src string
		want            []string
	}{
		{"a key that is no key", "f.hcl", "node \"a\" {\n  weights = {\n    \"Org/M\" = 5\n  }\n}\n",
			[]string{`f.hcl:2: weights: "Org/M" is not a weights key (lower-case letters, digits, '-' and '_', as the driver's attributes driver.llmgw.weights.<key> name them)`}},
		{"no bytes", "f.hcl", "node \"a\" {\n\n  weights = { k = 0, j = -1 }\n}\n",
			[]string{`f.hcl:3: weights["j"]: bytes must be between 1 and 1125899906842624, got -1`,
				`f.hcl:3: weights["k"]: bytes must be between 1 and 1125899906842624, got 0`}},
		{"bytes not a number", "f.hcl", "node \"a\" {\n  weights = { k = \"big\" }\n}\n",
			[]string{`f.hcl:2: weights: Unsuitable value type: a number is required`}},
		{"a rate of 0", "f.hcl", "node \"a\" {\n  fetch_bytes_per_second = 0\n}\n",
			[]string{`f.hcl:2: fetch_bytes_per_second must be positive, got 0`}},
		{"a rate too high", "f.hcl", "node \"a\" {\n  fetch_bytes_per_second = 2e12\n}\n",
			[]string{`f.hcl:2: fetch_bytes_per_second 2e+12 is out of range (at most 1e+12)`}},
		{"JSON: a negative rate", "f.json", "{\"node\": {\"a\": {\n  \"fetch_bytes_per_second\": -1}}}",
			[]string{`f.json:2: fetch_bytes_per_second must be positive, got -1`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseFleet(tt.file, []byte(tt.src))
			if err == nil {
				t.Fatalf("got no error, want %q", tt.want)
			}
			checkErrorLines(t, tt.file, err)
			if diff := cmp.Diff(tt.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
	// A fleet built in code is checked alike.
	f := Fleet{Nodes: []Node{{Name: "a", Pos: Pos{"x", 3}, Weights: map[string]int64{"K": 1}, FetchBytesPerSecond: -2}}}
	want := `x:3: node "a": weights: "K" is not a weights key (lower-case letters, digits, '-' and '_', as the driver's attributes driver.llmgw.weights.<key> name them)` + "\n" +
		`x:3: node "a": fetch_bytes_per_second must be positive, got -2`
	if err := f.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate: got %v, want %s", err, want)
	}
}
