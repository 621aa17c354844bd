package contract

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func mustLoad(t *testing.T, engine string) *Contract {
	t.Helper()
	c, err := Load(engine)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEmbeddedContractsParse reads every embedded contract and checks the
// header fields each one must have, and that its stated flag count (header
// count: "N flag lines") is what was read.
func TestEmbeddedContractsParse(t *testing.T) {
	t.Parallel()
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) < 2 {
		t.Fatalf("%d contracts embedded, want at least tgi and llamacpp", len(all))
	}
	for _, c := range all {
		t.Run(c.Engine, func(t *testing.T) {
			if c.Version == "" || c.Commit == "" || c.Kind == 0 || c.Prog == "" {
				t.Errorf("%s: version %q commit %q kind %v prog %q", c.File, c.Version, c.Commit, c.Kind, c.Prog)
			}
			for _, f := range c.Flags {
				if c.Flag(f.Name) != f {
					t.Errorf("%s:%d: %s does not look itself up", c.File, f.Line, f.Name)
				}
			}
			count := c.Header["count"]
			var n int
			if _, err := fmt.Sscan(count, &n); err != nil {
				t.Fatalf("%s: header count %q: %v", c.File, count, err)
			}
			if n != len(c.Flags) {
				t.Errorf("%s: header says %d flag lines, read %d", c.File, n, len(c.Flags))
			}
			// The exit status this package gives is the one the header records.
			if !strings.Contains(c.Header["parser"]+c.Header["error-unknown"]+c.Header["error-missing-value"], "status "+strconv.Itoa(c.Status())) {
				t.Errorf("%s: the parser and error-* header fields never say \"status %d\"", c.File, c.Status())
			}
		})
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, "tgi")
	for _, spec := range []string{"tgi", "tgi@" + c.Version, "tgi@" + strings.TrimPrefix(c.Version, "v")} {
		if got, err := Lookup(spec); err != nil || got.Engine != "tgi" {
			t.Errorf("Lookup(%q) = %v, %v", spec, got, err)
		}
	}
	for _, spec := range []string{"tgi@v0.0.1", "nope", "", "../tgi", "tgi.txt"} {
		if _, err := Lookup(spec); !errors.Is(err, ErrNoContract) {
			t.Errorf("Lookup(%q) = %v, want ErrNoContract", spec, err)
		}
	}
	_, err := Lookup("tgi@v0.0.1")
	if err == nil || !strings.Contains(err.Error(), "tgi@"+c.Version) {
		t.Errorf("Lookup of a version not pinned: %v, want it to name the pinned one", err)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	const head = "# engine: x\n# version: 1\n# parser: clap 4\n"
	for _, tc := range []struct{ name, body, want string }{
		{"no flags", head, "x.txt:1: no flag lines"},
		{"no engine", "# version: 1\n# parser: clap\n--a\t0\tno\t-\n", `x.txt:1: no "engine" header field`},
		{"columns", head + "--a\t0\tno\n", "x.txt:4: want FLAG, ARITY, REPEAT, ALIASES"},
		{"arity", head + "--a\t3\tno\t-\n", `x.txt:4: --a: arity "3"`},
		{"repeat", head + "--a\t1\tmaybe\t-\n", `x.txt:4: --a: repeat "maybe"`},
		{"name", head + "a\t1\tno\t-\n", `x.txt:4: flag "a"`},
		{"alias", head + "--a\t1\tno\t-a,b\n", `x.txt:4: --a: alias "b"`},
		{"dup", head + "--a\t1\tno\t-a\n--b\t1\tno\t-a\n", "x.txt:5: -a is already a spelling of --a (line 4)"},
		{"parser", "# engine: x\n# version: 1\n# parser: getopt\n--a\t0\tno\t-\n", `x.txt:3: parser "getopt"`},
		{"env", head + "--a\t1\tno\t-\tA B\n", `x.txt:4: --a: env "A B"`},
		{"header twice", "# engine: x\n# engine: y\n# version: 1\n# parser: clap\n--a\t0\tno\t-\n", `x.txt:2: header field "engine" given twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.txt", []byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	c, err := Parse("x.txt", []byte(head+"# f.rs:12 a: bool\n# note: not a header field\n--a\t0\tno\t-a\tA_ENV\n--b\t+\tappend\t-\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := c.Flag("-a")
	if a == nil || a.Name != "--a" || a.Env != "A_ENV" || a.Source != "f.rs:12" || a.Decl != "a: bool" || a.Line != 6 {
		t.Errorf("flag --a read as %+v", a)
	}
	if _, ok := c.Header["note"]; ok {
		t.Error("a comment after the header block was read as a header field")
	}
	if b := c.Flag("--b"); b.Arity.Min() != 1 || b.Arity.Max() != -1 || b.Repeat != RepeatAppend || b.Env != "" {
		t.Errorf("flag --b read as %+v", b)
	}
}

// checkCase is one command line and what the parser says of it.
type checkCase struct {
	name string
	args []string
	// kind is the error kind; 0 means the parser accepts the line.
	kind ErrorKind
	// msg is the error's first line (Message); stderr, when set, is all of it.
	msg, stderr string
	// header, when set, is the header field whose text quotes msg verbatim.
	header string
}

func runCases(t *testing.T, c *Contract, cases []checkCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Check(tc.args)
			if tc.kind == 0 {
				if err != nil {
					t.Fatalf("Check(%q) = %v, want accepted", tc.args, err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Check(%q) = %v, want an *Error", tc.args, err)
			}
			if e.Kind != tc.kind || e.Message != tc.msg || e.Status != c.Status() {
				t.Errorf("Check(%q) = %v %q status %d, want %v %q status %d", tc.args, e.Kind, e.Message, e.Status, tc.kind, tc.msg, c.Status())
			}
			if tc.stderr != "" && e.Stderr != tc.stderr {
				t.Errorf("Check(%q) stderr:\n%s\nwant:\n%s", tc.args, e.Stderr, tc.stderr)
			}
			if !strings.HasSuffix(e.Stderr, "\n") || !strings.Contains(e.Stderr, tc.msg) {
				t.Errorf("stderr %q does not hold the message or end in a newline", e.Stderr)
			}
			if tc.header != "" && !strings.Contains(c.Header[tc.header], tc.msg) {
				t.Errorf("header %s does not quote %q:\n%s", tc.header, tc.msg, c.Header[tc.header])
			}
		})
	}
}

func TestClapTGI(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, "tgi")
	if c.Kind != Clap || c.Status() != 2 || c.Prog != "text-generation-launcher" {
		t.Fatalf("tgi: kind %v status %d prog %q", c.Kind, c.Status(), c.Prog)
	}
	recipe := []string{"--model-id", "org/m", "--hostname", "127.0.0.1", "--port", "8000", "--num-shard", "2"}
	with := func(extra ...string) []string { return append(append([]string{}, recipe...), extra...) }
	runCases(t, c, []checkCase{
		{name: "recipe", args: recipe},
		{name: "every value syntax", args: []string{"--port=80", "-g", "5", "--hostname", "::1", "--max-total-tokens=4096", "--trust-remote-code", "-e"}},
		{name: "short attached", args: []string{"-p80"}},
		{name: "short equals", args: []string{"-p=80"}},
		{name: "append repeats", args: with("--cuda-graphs", "1,2", "--cuda-graphs", "4", "--cors-allow-origin", "a", "--cors-allow-origin", "b")},
		{name: "value dash alone", args: []string{"--model-id", "-"}},
		{name: "empty attached value", args: []string{"--revision="}},
		{name: "help exits first", args: []string{"--port", "1", "--help", "--port", "2"}},
		{name: "double dash alone", args: with("--")},
		{
			name: "repeat", args: []string{"--port", "1", "--port", "2"}, kind: Repeated,
			msg:    "error: the argument '--port <PORT>' cannot be used multiple times",
			stderr: "error: the argument '--port <PORT>' cannot be used multiple times\n",
			header: "error-repeat",
		},
		{name: "repeat by alias", args: []string{"--port", "1", "-p", "2"}, kind: Repeated, msg: "error: the argument '--port <PORT>' cannot be used multiple times"},
		{name: "repeat attached", args: []string{"--port=1", "--port=2"}, kind: Repeated, msg: "error: the argument '--port <PORT>' cannot be used multiple times"},
		{name: "catalog repeats the recipe", args: with("--num-shard", "4"), kind: Repeated, msg: "error: the argument '--num-shard <NUM_SHARD>' cannot be used multiple times"},
		{
			name: "repeat switch", args: []string{"--trust-remote-code", "--trust-remote-code"}, kind: Repeated,
			msg: "error: the argument '--trust-remote-code' cannot be used multiple times", header: "error-repeat",
		},
		{name: "unknown", args: []string{"--foo"}, kind: Unknown, msg: "error: unexpected argument '--foo' found", header: "error-unknown"},
		{name: "unknown with value", args: []string{"--foo=1"}, kind: Unknown, msg: "error: unexpected argument '--foo' found"},
		{name: "unknown after others", args: []string{"--port", "1", "--trust-remote-code", "--foo"}, kind: Unknown, msg: "error: unexpected argument '--foo' found"},
		{name: "similar", args: []string{"--num_shard", "2"}, kind: Unknown, msg: "error: unexpected argument '--num_shard' found", header: "error-unknown"},
		{name: "positional", args: []string{"WORD"}, kind: Unknown, msg: "error: unexpected argument 'WORD' found", header: "error-unknown"},
		{name: "after double dash", args: []string{"--", "--port"}, kind: Unknown, msg: "error: unexpected argument '--port' found"},
		{name: "second value", args: []string{"--port", "1", "2"}, kind: Unknown, msg: "error: unexpected argument '2' found"},
		{
			name: "missing value", args: []string{"--port"}, kind: MissingValue,
			msg: "error: a value is required for '--port <PORT>' but none was supplied", header: "error-missing-value",
		},
		{name: "missing value before a flag", args: []string{"--port", "--hostname", "x"}, kind: MissingValue, msg: "error: a value is required for '--port <PORT>' but none was supplied"},
		{name: "missing value of an Option<bool>", args: []string{"--sharded"}, kind: MissingValue, msg: "error: a value is required for '--sharded <SHARDED>' but none was supplied"},
		{name: "dash value", args: []string{"--num-shard", "-1"}, kind: MissingValue, msg: "error: a value is required for '--num-shard <NUM_SHARD>' but none was supplied"},
		{name: "unknown short", args: []string{"-x"}, kind: Unknown, msg: "error: unexpected argument '-x' found"},
		{
			name: "switch value", args: []string{"--trust-remote-code=true"}, kind: UnexpectedValue,
			msg: "error: unexpected value 'true' for '--trust-remote-code' found; no more were expected", header: "error-switch-value",
		},
	})
	// One hint for every parser: internal/suggest's.
	var e *Error
	if err := c.Check([]string{"--num_shard", "2"}); !errors.As(err, &e) || e.Hint != "did you mean --num-shard?" {
		t.Errorf("--num_shard: %v, hint %q; want did you mean --num-shard?", err, hintOf(err))
	}
}

func hintOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Hint
	}
	return ""
}

func TestLlamaCpp(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, "llamacpp")
	if c.Kind != LlamaCpp || c.Status() != 1 || c.Prog != "llama-server" {
		t.Fatalf("llamacpp: kind %v status %d prog %q", c.Kind, c.Status(), c.Prog)
	}
	recipe := []string{"-m", "/models/m.gguf", "--host", "127.0.0.1", "--port", "8000"}
	with := func(extra ...string) []string { return append(append([]string{}, recipe...), extra...) }
	runCases(t, c, []checkCase{
		{name: "recipe", args: recipe},
		{name: "recipe with alias and layers", args: with("--alias", "m", "-ngl", "999", "--ctx-size", "4096")},
		{name: "repeats take the last", args: with("--port", "9000", "--port", "9001", "-m", "b.gguf")},
		{name: "underscores", args: with("--n_gpu_layers", "99")},
		{name: "values that look like flags", args: []string{"--seed", "-1", "--alias", "--port"}},
		{name: "two values", args: []string{"--control-vector-layer-range", "1", "4", "--lora-scaled", "a.gguf:0.5"}},
		{name: "stoi takes a number's start", args: with("--port", " 12abc", "-c", "-4")},
		{name: "switches", args: []string{"-cb", "-nocb", "--slots", "--no-slots"}},
		{
			name: "unknown", args: with("--foo"), kind: Unknown,
			msg: "error: invalid argument: --foo", stderr: "error: invalid argument: --foo\n", header: "error-unknown",
		},
		{name: "unknown normalised", args: []string{"--foo_bar"}, kind: Unknown, msg: "error: invalid argument: --foo-bar"},
		{name: "no equals syntax", args: []string{"--port=8080"}, kind: Unknown, msg: "error: invalid argument: --port=8080"},
		{name: "short not normalised", args: []string{"-n_gpu"}, kind: Unknown, msg: "error: invalid argument: -n_gpu"},
		{name: "positional", args: []string{"WORD"}, kind: Unknown, msg: "error: invalid argument: WORD", header: "positional"},
		{
			name: "missing value", args: []string{"--port"}, kind: MissingValue,
			msg:    `error while handling argument "--port": expected value for argument`,
			stderr: "error while handling argument \"--port\": expected value for argument\n\nusage:\n--port PORT\n\n\nto show complete usage, run with -h\n",
			header: "error-missing-value",
		},
		{name: "missing second value", args: []string{"--control-vector-layer-range", "1"}, kind: MissingValue, msg: `error while handling argument "--control-vector-layer-range": expected value for argument`},
		{name: "not a number", args: with("--port", "abc"), kind: BadValue, msg: `error while handling argument "--port": stoi`},
		{name: "out of int range", args: with("-c", "2147483648"), kind: BadValue, msg: `error while handling argument "-c": stoi`},
		{name: "removed", args: with("--draft", "4"), kind: Unknown, msg: `error while handling argument "--draft": the argument has been removed. use --spec-draft-n-max or --spec-ngram-mod-n-max`},
		{name: "version stops", args: []string{"--version", "--foo"}},
	})
}

func TestArgparseVLLM(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, "vllm")
	if c.Kind != Argparse || c.Status() != 2 {
		t.Fatalf("vllm: kind %v status %d", c.Kind, c.Status())
	}
	recipe := []string{"serve", "org/m", "--host", "127.0.0.1", "--port", "8000", "--tensor-parallel-size", "2"}
	with := func(extra ...string) []string { return append(append([]string{}, recipe...), extra...) }
	runCases(t, c, []checkCase{
		{name: "recipe", args: with("--served-model-name", "m")},
		{name: "model only", args: []string{"serve", "org/m"}},
		{name: "multi-node worker", args: with("--served-model-name", "m", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "1234", "--headless")},
		{name: "repeats take the last", args: with("--port", "9000", "--tensor-parallel-size", "4", "-tp", "8")},
		{name: "several served names", args: with("--served-model-name", "a", "b")},
		{name: "underscores", args: with("--max_model_len", "4096", "--max_num_seqs=8")},
		// Accepted unchecked, as argparse accepts an unambiguous prefix;
		// an ambiguous one, which argparse refuses, is let through too.
		{name: "abbreviation", args: with("--tensor-parallel", "2", "--max-model=4096")},
		{name: "ambiguous abbreviation", args: with("--max-num", "4")},
		{name: "negative number value", args: with("--seed", "-1")},
		{name: "boolean optional", args: with("--enable-prefix-caching", "--no-enable-prefix-caching")},
		{name: "model flag", args: []string{"serve", "--port", "1", "--model", "org/m", "--served-model-name", "m"}},
		{name: "optimization level", args: with("-O3", "-O", "2", "-O=1")},
		{name: "dotted json keys", args: with("--compilation-config.mode", "3", "--compilation-config.cudagraph_sizes+", "1,2", "--hf-overrides.a.b=1")},
		{name: "help exits", args: []string{"serve", "--help", "--foo"}},
		{name: "help with a keyword", args: []string{"serve", "--help=ModelConfig"}},
		{name: "unknown", args: with("--foo"), kind: Unknown, msg: "vllm serve: error: unrecognized arguments: --foo"},
		{name: "unknown with underscores", args: with("--foo_bar", "1"), kind: Unknown, msg: "vllm serve: error: unrecognized arguments: --foo_bar"},
		{name: "unknown dotted", args: with("--no-such-config.a", "1"), kind: Unknown, msg: "vllm serve: error: unrecognized arguments: --no-such-config.a"},
		{name: "unknown short", args: with("-x"), kind: Unknown, msg: "vllm serve: error: unrecognized arguments: -x"},
		{name: "second positional", args: []string{"serve", "A", "B"}, kind: Unknown, msg: "vllm serve: error: unrecognized arguments: B"},
		{name: "missing value", args: with("--port"), kind: MissingValue, msg: "vllm serve: error: argument --port: expected one argument", header: "error-missing-value"},
		{name: "missing value before a flag", args: []string{"serve", "m", "--port", "--host", "h"}, kind: MissingValue, msg: "vllm serve: error: argument --port: expected one argument"},
		{name: "missing value with alias", args: with("-tp"), kind: MissingValue, msg: "vllm serve: error: argument --tensor-parallel-size/-tp: expected one argument"},
		{name: "missing values", args: with("--served-model-name"), kind: MissingValue, msg: "vllm serve: error: argument --served-model-name: expected at least one argument"},
		{name: "switch value", args: with("--headless=1"), kind: UnexpectedValue, msg: "vllm serve: error: argument --headless: ignored explicit argument '1'"},
		{name: "no subcommand", args: []string{"org/m", "--port", "1"}, kind: Unknown, msg: "vllm serve: error: want serve first, got 'org/m'"},
		// The LoRA flags llmgw renders (engine.AdapterArgs), and the values
		// their types refuse: max_loras an int, max_lora_rank a Literal of
		// ints (type=int with choices).
		{name: "lora", args: with("--enable-lora", "--max-loras", "4", "--max-cpu-loras", "8", "--max-lora-rank", "016",
			"--lora-modules", `{"name":"a","path":"/a"}`, `{"name":"b","path":"/b"}`)},
		{name: "int with underscores and spaces", args: with("--max-loras", " 1_0 ", "--max-lora-rank=+8")},
		{name: "not an int", args: with("--max-loras", "four"), kind: BadValue, msg: "vllm serve: error: argument --max-loras: invalid int value: 'four'"},
		{name: "not an int, attached", args: with("--max-loras=4.0"), kind: BadValue, msg: "vllm serve: error: argument --max-loras: invalid int value: '4.0'"},
		{name: "not a choice", args: with("--max-lora-rank", "24"), kind: BadValue,
			msg: "vllm serve: error: argument --max-lora-rank: invalid choice: 24 (choose from 1, 8, 16, 32, 64, 128, 256, 320, 512)"},
		{name: "a choice's type first", args: with("--max-lora-rank", "r16"), kind: BadValue, msg: "vllm serve: error: argument --max-lora-rank: invalid int value: 'r16'"},
	})
	if h := hintOf(c.Check(with("--max-mdoel-len", "8"))); !strings.HasPrefix(h, "did you mean --max-model-len") {
		t.Errorf("--max-mdoel-len: hint %q, want did you mean --max-model-len first", h)
	}
	// What the parser read.
	p, err := c.Walk([]string{"serve", "org/m", "-tp", "2", "--max_model_len=8", "--compilation-config.mode", "3"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(p.Positionals, " ") != "serve org/m" {
		t.Errorf("positionals %q", p.Positionals)
	}
	var got []string
	for _, o := range p.Flags {
		got = append(got, o.Flag.Name+"="+strings.Join(o.Values, ","))
	}
	if want := `--tensor-parallel-size=2 --max-model-len=8 --compilation-config=3`; strings.Join(got, " ") != want {
		t.Errorf("flags read %q, want %q", strings.Join(got, " "), want)
	}
}

func TestArgparseSGLang(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, "sglang")
	if c.Kind != Argparse || c.Status() != 2 {
		t.Fatalf("sglang: kind %v status %d", c.Kind, c.Status())
	}
	recipe := []string{"--model-path", "org/m", "--host", "127.0.0.1", "--port", "8000", "--tp-size", "2"}
	with := func(extra ...string) []string { return append(append([]string{}, recipe...), extra...) }
	removed := c.Flag("--enable-expert-distribution-metrics")
	if removed == nil || !strings.HasPrefix(removed.Removed, "sglang serve: error: --enable-expert-distribution-metrics is no longer supported") {
		t.Fatalf("the removed flag's message was not read from its note: %+v", removed)
	}
	runCases(t, c, []checkCase{
		{name: "recipe", args: with("--served-model-name", "m")},
		{name: "multi-node", args: with("--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.1:5000")},
		{name: "abbreviation", args: with("--tp", "4", "--dp", "2")},
		{name: "model alias", args: []string{"--model", "org/m"}},
		{name: "repeats take the last", args: with("--tp-size", "8", "--tensor-parallel-size", "4")},
		{
			name: "unknown", args: with("--foo"), kind: Unknown,
			msg: "sglang serve: error: unrecognized arguments: --foo", header: "error-unknown",
			stderr: "sglang serve: error: unrecognized arguments: --foo\n",
		},
		{name: "no underscore rewriting", args: with("--tp_size", "2"), kind: Unknown, msg: "sglang serve: error: unrecognized arguments: --tp_size"},
		{name: "ambiguous abbreviation", args: with("--pp", "2")},
		{
			name: "required", args: []string{"--port", "1"}, kind: MissingValue,
			msg: "sglang serve: error: the following arguments are required: --model-path/--model", header: "error-missing-value",
		},
		{name: "missing value", args: with("--port"), kind: MissingValue, msg: "sglang serve: error: argument --port: expected one argument", header: "error-missing-value"},
		{name: "removed flag", args: with("--enable-expert-distribution-metrics"), kind: Unknown, msg: removed.Removed},
	})
}

// TestArgparseLayouts checks the layout this package keeps for each
// argparse engine against what its contract's header says in prose.
func TestArgparseLayouts(t *testing.T) {
	t.Parallel()
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range all {
		if c.Kind != Argparse {
			continue
		}
		l, ok := argparseLayouts[c.Engine]
		if !ok {
			t.Errorf("%s: no argparse layout", c.File)
			continue
		}
		h := c.Header
		if !strings.Contains(h["parser"]+h["error-missing-value"], l.prog) {
			t.Errorf("%s: the header never names the prog %q", c.File, l.prog)
		}
		if _, ok := h["underscores"]; ok != l.flexible {
			t.Errorf("%s: underscores field present %v, layout flexible %v", c.File, ok, l.flexible)
		}
		pos := h["positional"]
		if l.subcommand == "" {
			if !strings.HasPrefix(pos, "none") || l.positionals != 0 {
				t.Errorf("%s: positional %q, layout has %d", c.File, pos, l.positionals)
			}
		} else if !strings.HasPrefix(pos, l.subcommand+" [") || strings.Count(pos[:strings.Index(pos, " -")], "[") != l.positionals {
			t.Errorf("%s: positional %q, layout says %s and %d optional", c.File, pos, l.subcommand, l.positionals)
		}
		// Abbreviations are accepted unchecked, right only where argparse
		// takes them.
		if !strings.Contains(h["allow_abbrev"], "True") {
			t.Errorf("%s: allow_abbrev %q: the walker accepts prefixes unless it says False", c.File, h["allow_abbrev"])
		}
	}
}

// TestEveryFlag gives every spelling of every flag of every contract, once
// and then twice: once is accepted, and twice is refused exactly where the
// contract says the flag may not repeat.
func TestEveryFlag(t *testing.T) {
	t.Parallel()
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	prefix := map[string][]string{"vllm": {"serve", "org/m"}, "sglang": {"--model-path", "org/m"}}
	for _, c := range all {
		t.Run(c.Engine, func(t *testing.T) {
			for _, f := range c.Flags {
				if f.Name == "--help" || f.Name == "--version" || f.Name == "--usage" || f.Name == "--completion-bash" || f.Removed != "" {
					continue
				}
				for _, name := range f.Names() {
					one := []string{name}
					for range f.Arity.Min() {
						one = append(one, "1")
					}
					base := prefix[c.Engine]
					switch {
					case f.Name == "--model-path" && c.Engine == "sglang":
						base = nil
					case f.Name == "--model" && c.Engine == "vllm":
						base = []string{"serve"}
					}
					args := append(append([]string{}, base...), one...)
					if err := c.Check(args); err != nil {
						t.Errorf("%s:%d: %q: %v", c.File, f.Line, args, err)
						continue
					}
					twice := append(append([]string{}, args...), one...)
					err := c.Check(twice)
					if f.Repeat == RepeatNo {
						var e *Error
						if !errors.As(err, &e) || e.Kind != Repeated {
							t.Errorf("%s:%d: %q: %v, want a repeat error", c.File, f.Line, twice, err)
						}
					} else if err != nil {
						t.Errorf("%s:%d: %q: %v, want accepted (repeat %s)", c.File, f.Line, twice, err, f.Repeat)
					}
				}
			}
		})
	}
}
