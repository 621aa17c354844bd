package realengine_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/engine/contract"
	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/realengine"
)

var update = flag.Bool("update", false, "rewrite engine/contract/llamacpp.txt from the real llama-server's --help and its source")

const contractFile = "../../../engine/contract/llamacpp.txt"

// helpOption is one option as the real llama-server's --help lists it
// (common/arg.cpp common_arg::to_string): its names (args, then the
// negated args_neg), value hints, and env var.
type helpOption struct {
	names []string
	hints []string
	env   string
}

var (
	helpOptionLine = regexp.MustCompile(`^(-[^ ,]+(?:, +-[^ ,]+)*)((?: [^ -][^ ]*)*)(?: {2,}|$)`)
	helpEnv        = regexp.MustCompile(`\(env: ([A-Z0-9_]+)\)`)
)

// parseHelp reads the option table llama-server --help prints.
func parseHelp(t *testing.T, text string) []helpOption {
	t.Helper()
	var opts []helpOption
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "-----") || line == "" {
			continue
		}
		if strings.HasPrefix(line, "-") {
			m := helpOptionLine.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("--help line not understood: %q", line)
			}
			o := helpOption{}
			for _, n := range strings.Split(m[1], ",") {
				o.names = append(o.names, strings.TrimSpace(n))
			}
			o.hints = strings.Fields(m[2])
			opts = append(opts, o)
		}
		if len(opts) > 0 && opts[len(opts)-1].env == "" {
			if e := helpEnv.FindStringSubmatch(line); e != nil {
				opts[len(opts)-1].env = e[1]
			}
		}
	}
	return opts
}

func realHelp(t *testing.T) []helpOption {
	t.Helper()
	realengine.Require(t)
	out, err := exec.Command(llamabuild.Binary(), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("llama-server --help: %v\n%s", err, out)
	}
	opts := parseHelp(t, string(out))
	if len(opts) < 100 {
		t.Fatalf("llama-server --help listed %d options; the parse must be wrong:\n%s", len(opts), out)
	}
	return opts
}

// contractView is what the contract and --help both say of an option.
type contractView struct {
	Names []string
	Arity string
	Env   string
}

func (o helpOption) view(arity string) contractView {
	names := append([]string(nil), o.names...)
	sort.Strings(names)
	env := o.env
	if env == "" {
		env = "-"
	}
	return contractView{Names: names, Arity: arity, Env: env}
}

// handlerRE matches a handler lambda's parameter list in common/arg.cpp.
var handlerRE = regexp.MustCompile(`\[\]\s*\(\s*common_params\s*&\s*(?:/\*\w*\*/|\w*)\s*((?:,[^)]*)?)\)`)

// arity is how many values an option takes, from its handler's parameters
// (common/arg.h: handler_void and handler_bool take none, handler_int and
// handler_string one, handler_str_str two); --help's value hints cannot say,
// since some contain spaces.
func arity(t *testing.T, body string, o helpOption) string {
	t.Helper()
	m := handlerRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no handler found in common/arg.cpp for %v", o.names)
	}
	params := strings.TrimSpace(strings.TrimPrefix(m[1], ","))
	switch {
	case params == "":
		return "0"
	case strings.Count(params, ",") == 1:
		return "2"
	case strings.HasPrefix(params, "bool"):
		return "0"
	}
	return "1"
}

// The llama.cpp contract lists exactly the options the real llama-server
// takes, with their names, their number of values and their environment
// variables, as its --help prints them. With -update the contract is
// rewritten from --help and from common/arg.cpp in the built source tree
// (declaration lines, and which options append on a repeat).
func TestLlamaCppContractMatchesRealHelp(t *testing.T) {
	opts := realHelp(t)
	_, bodies := argDecls(t)
	if *update {
		writeContract(t, opts)
	}
	c, err := contract.Load("llamacpp")
	if err != nil {
		t.Fatal(err)
	}
	if c.Version != llamabuild.Version || !strings.HasPrefix(c.Commit, llamabuild.Commit) {
		t.Errorf("contract pins %s (%s), want %s (%s)", c.Version, c.Commit, llamabuild.Version, llamabuild.Commit)
	}
	want := map[string]contractView{}
	for _, o := range opts {
		want[o.names[0]] = o.view(arity(t, bodies[o.names[0]], o))
	}
	got := map[string]contractView{}
	for _, f := range c.Flags {
		names := f.Names()
		sort.Strings(names)
		env := f.Env
		if env == "" {
			env = "-"
		}
		v := contractView{Names: names, Arity: string(f.Arity), Env: env}
		// Key by the first name --help prints, which is in names.
		key := ""
		for _, o := range opts {
			for _, n := range o.names {
				if n == f.Name {
					key = o.names[0]
				}
			}
		}
		if key == "" {
			key = "contract-only " + f.Name
		}
		got[key] = v
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("contract vs llama-server --help (-help +contract); go test ./internal/testing/realengine -run ContractMatches -update rewrites it:\n%s", diff)
	}
}

// argDecl finds where common/arg.cpp declares each option: the line of its
// name list, and the text up to the next add_opt (its handler).
func argDecls(t *testing.T) (map[string]int, map[string]string) {
	t.Helper()
	src := filepath.Join(llamabuild.Dir(), "src", "common", "arg.cpp")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("read the source the contract cites: %v", err)
	}
	lines := strings.Split(string(b), "\n")
	line := map[string]int{}
	body := map[string]string{}
	decl := regexp.MustCompile(`\{\s*("-[^}]*)\}`)
	var cur []string
	var text strings.Builder
	flush := func() {
		for _, n := range cur {
			if _, ok := body[n]; !ok {
				body[n] = text.String()
			}
		}
		cur = nil
		text.Reset()
	}
	inOpt := false // between an add_opt and its name list
	for i, l := range lines {
		if strings.Contains(l, "add_opt(common_arg(") {
			flush()
			inOpt = true
		}
		if m := decl.FindStringSubmatch(l); m != nil && inOpt {
			inOpt = false
			for _, q := range regexp.MustCompile(`"(-[^"]+)"`).FindAllStringSubmatch(m[1], -1) {
				cur = append(cur, q[1])
				if _, ok := line[q[1]]; !ok {
					line[q[1]] = i + 1
				}
			}
		}
		if cur != nil {
			text.WriteString(l + "\n")
		}
	}
	flush()
	return line, body
}

// removedRE: an option kept only to say it was removed (arg.cpp
// arg_removed).
var removedRE = regexp.MustCompile(`arg_removed\("([^"]*)"\)`)

// appendRE: a handler that adds to a list (or a string) on each occurrence
// instead of setting a value.
var appendRE = regexp.MustCompile(`push_back|emplace_back|\.insert\(|\+= *`)

func writeContract(t *testing.T, opts []helpOption) {
	t.Helper()
	line, body := argDecls(t)
	var b strings.Builder
	appends := 0
	switches, one, two := 0, 0, 0
	ar := map[string]string{}
	for _, o := range opts {
		ar[o.names[0]] = arity(t, body[o.names[0]], o)
		switch ar[o.names[0]] {
		case "0":
			switches++
		case "1":
			one++
		default:
			two++
		}
	}
	head := `# engine: llamacpp
# version: 0.4.0
# commit: 80fb11ac73e66d89eae2c6a91d8a77428fa733ed
# version-note: the llama.cpp source the npm package node-llama-cpp@3.21.1 ships (package/llama/gitRelease.bundle, one squashed commit 80fb11a; llama/llama.cpp.info.json names tag v0.4.0), built by scripts/llama-server.sh; --version prints "version: 0.4.0-dev (build 1, commit 80fb11a)"
# source: common/arg.cpp common_params_parser_init() (the add_opt(common_arg(...)) calls; line numbers below are each option's name list), parse loop common_params_parse_ex() arg.cpp:812-874, called with LLAMA_EXAMPLE_SERVER from tools/server/server.cpp:105
# extracted: generated by internal/testing/realengine (go test -run ContractMatches -update) from the real llama-server's --help (names, value hints, env vars: exactly the options that binary's parser registers) and from common/arg.cpp (declaration lines; REPEAT append where the handler adds to a list or string). The same test checks this file against --help in every run, and the differential test checks accept/refuse against the binary.
# parser: llama.cpp common/arg.cpp common_params_parse (hand-written loop over argv, no library)
# arity-rule: from each option's handler in arg.cpp (common/arg.h): handler_void => 0 (a switch), handler_bool => 0 (a switch with its negated --no- form), handler_int or handler_string => 1, handler_str_str => 2. The next argv token is always taken as the value, even when it starts with '-' (arg.cpp:848-866).
# error-unknown: "error: invalid argument: --foo" on stderr (arg.cpp:823-825), then llama-server exits with status 1 (tools/server/server.cpp:105-107). --port=8080 is also an unknown argument: there is no --flag=value syntax.
# error-repeat: none. A repeated option logs "DEPRECATED: argument '--port' specified multiple times, use comma-separated values instead (only last value will be used)" (arg.cpp:826-831) and runs its handler again: scalar options keep the last value, list options (REPEAT append) accumulate.
# error-missing-value: 'error while handling argument "--port": expected value for argument' + blank line + "usage:" + that option's help + "to show complete usage, run with -h"; exit 1 (arg.cpp:808-810, 867-872). A value that fails std::stoi gives the same block with "stoi" as the reason.
# normalisation: for tokens starting with "--", every '_' is replaced by '-' before lookup (arg.cpp:819-822); single-dash short names are not changed.
# env: 5th column is the environment variable (set_env) read before the command line; a command-line value wins, with "warn: LLAMA_ARG_PORT environment variable is set, but will be overwritten by command line argument --port" (arg.cpp:836-838).
# positional: none; any bare word is "error: invalid argument: WORD"
# aliases: the option's other names in --help order, its negated forms (args_neg, e.g. --no-mmap for --mmap) among them: the same option for parsing
# arity: 0 = switch; 1 = one value token; 2 = exactly two value tokens
# repeat: last = may repeat, the last occurrence wins; append = every occurrence kept
# columns: FLAG<TAB>ARITY<TAB>REPEAT<TAB>ALIASES<TAB>ENV ; FLAG is the first "--" name the option declares (else its first name)
`
	b.WriteString(head)
	var rows strings.Builder
	for _, o := range opts {
		flagName := o.names[0]
		for _, n := range o.names {
			if strings.HasPrefix(n, "--") {
				flagName = n
				break
			}
		}
		var aliases []string
		for _, n := range o.names {
			if n != flagName {
				aliases = append(aliases, n)
			}
		}
		al := "-"
		if len(aliases) > 0 {
			al = strings.Join(aliases, ",")
		}
		env := o.env
		if env == "" {
			env = "-"
		}
		repeat := "last"
		if appendRE.MatchString(body[o.names[0]]) {
			repeat = "append"
			appends++
		}
		if m := handlerRE.FindStringSubmatch(body[o.names[0]]); m != nil && ar[o.names[0]] == "1" && regexp.MustCompile(`^,\s*int\b`).MatchString(m[1]) {
			rows.WriteString("# note: value: int (handler_int: std::stoi)\n")
		}
		if m := removedRE.FindStringSubmatch(body[o.names[0]]); m != nil {
			fmt.Fprintf(&rows, "# note: removed flag: ('the argument has been removed. %s')\n", m[1])
		}
		if l, ok := line[o.names[0]]; ok {
			fmt.Fprintf(&rows, "# arg.cpp:%d %s\n", l, strings.Join(append(o.names, o.hints...), " "))
		} else {
			fmt.Fprintf(&rows, "# note: not found in common/arg.cpp's name lists\n")
		}
		fmt.Fprintf(&rows, "%s\t%s\t%s\t%s\t%s\n", flagName, ar[o.names[0]], repeat, al, env)
	}
	fmt.Fprintf(&b, "# count: %d flag lines: %d switches, %d one-value, %d two-value; %d append, %d last\n",
		len(opts), switches, one, two, appends, len(opts)-appends)
	b.WriteString(rows.String())
	if err := os.WriteFile(contractFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote %s: %d options", contractFile, len(opts))
}
