// Package contract holds each inference engine's command-line contract at a
// pinned version: every flag its real parser accepts, with its arity, whether
// it may repeat, its aliases and the environment variable it reads, read from
// the engine's own source (see docs/engines/). Check walks an argv as that
// parser reads it and refuses what it refuses for the mistakes worth
// catching (an unknown flag, a missing value, a forbidden repeat, a removed
// flag, llama.cpp's int values), with the engine's exit status and a message
// in the shape of its first line. Where the walk cannot tell (argparse's
// abbreviations) it accepts: it may let through a line the engine refuses,
// never refuse one the engine runs.
//
// The contracts are the *.txt files beside this package, embedded at build
// time; the package does no I/O. Their format:
//
//	# key: value                       header fields, before the first flag
//	# file.ext:LINE declaration        where the next flag is declared (optional)
//	# note: ...                        free comments
//	FLAG<TAB>ARITY<TAB>REPEAT<TAB>ALIASES[<TAB>ENV]
//
// ARITY is 0 (a switch), 1 or 2 (that many value tokens), ? (zero or one), +
// (one or more) or * (any number). REPEAT is no (a second occurrence is a
// parse error), last (the last one wins) or append (every one is kept).
// ALIASES is a comma-separated list of the flag's other names, or -. ENV is
// the environment variable the engine reads for the flag, or -. Header fields
// engine, version and parser are required; parser names the parser kind
// (argparse, clap or llama.cpp's own loop); error-* fields record the real
// parser's messages (llama.cpp's first lines are reproduced exactly: a
// differential test compares them with the real server's).
package contract

import (
	"embed"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
)

//go:embed *.txt
var files embed.FS

// Kind is the family of command-line parser an engine uses.
type Kind int

// Parser kinds.
const (
	// Argparse is Python's argparse (vLLM, SGLang).
	Argparse Kind = iota + 1
	// Clap is Rust's clap (TGI's text-generation-launcher).
	Clap
	// LlamaCpp is llama.cpp's hand-written loop (common_params_parse).
	LlamaCpp
)

func (k Kind) String() string {
	switch k {
	case Argparse:
		return "argparse"
	case Clap:
		return "clap"
	case LlamaCpp:
		return "llama.cpp"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Exit statuses of a parse error, by kind: argparse's error() exits 2,
// clap's USAGE_CODE is 2, llama-server returns 1 when common_params_parse
// fails.
func (k Kind) exitStatus() int {
	if k == LlamaCpp {
		return 1
	}
	return 2
}

// Arity is how many value tokens a flag takes: "0", "1", "2", "?", "+", "*".
type Arity string

// Min is the fewest value tokens the flag takes.
func (a Arity) Min() int {
	switch a {
	case "1", "+":
		return 1
	case "2":
		return 2
	}
	return 0
}

// Max is the most value tokens the flag takes; -1 is unbounded.
func (a Arity) Max() int {
	switch a {
	case "0":
		return 0
	case "1", "?":
		return 1
	case "2":
		return 2
	}
	return -1
}

func (a Arity) valid() bool {
	switch a {
	case "0", "1", "2", "?", "+", "*":
		return true
	}
	return false
}

// Repeat is what a second occurrence of a flag does.
type Repeat string

// Repeat rules.
const (
	RepeatNo     Repeat = "no"     // a parse error
	RepeatLast   Repeat = "last"   // the last occurrence wins
	RepeatAppend Repeat = "append" // every occurrence is kept
)

// Flag is one flag of a contract.
type Flag struct {
	// Name is the flag's main spelling, such as --port.
	Name    string
	Arity   Arity
	Repeat  Repeat
	Aliases []string
	// Env is the environment variable the engine reads for the flag; "" none.
	Env string
	// Line is the flag's line in its contract file.
	Line int
	// Source and Decl come from the comment line "# file:LINE declaration"
	// above the flag, when there is one: where the engine declares it, and
	// the declaration (for llama.cpp, the names and value hints its usage
	// text shows).
	Source, Decl string
	// Required is set by a comment "# [unsure: |note: ]required: ..." above
	// the flag: the parser rejects a command line without it.
	Required bool
	// Removed is the parser's message for a flag that is still declared but
	// fails when given, from a comment "# [unsure: |note: ]removed flag:
	// ... ('MESSAGE ...')" above it; "" for every other flag.
	Removed string
	// Int is set by a comment "# note: value: int ..." above the flag: its
	// value goes through C++'s std::stoi (llama.cpp's handler_int), which
	// refuses a value that does not start with a number; for argparse,
	// through Python's int() (type=int), which refuses anything but a whole
	// number.
	Int bool
	// Choices, from "# note: value: int, choices A,B,C ..." (or "value:
	// choices A,B,C"), are the only values argparse takes (choices=):
	// compared as numbers for an Int flag.
	Choices []string
}

// Names are the flag's spellings: Name, then its aliases.
func (f *Flag) Names() []string { return append([]string{f.Name}, f.Aliases...) }

// Contract is one engine's command-line contract at one version.
type Contract struct {
	// File is the contract's file name, such as tgi.txt.
	File string
	// Engine, Version, Commit and Parser are the header fields of the same
	// names.
	Engine, Version, Commit, Parser string
	Kind                            Kind
	// Header holds every header field, by key.
	Header map[string]string
	// HeaderLine is each header field's line.
	HeaderLine map[string]int
	Flags      []*Flag
	// Prog is the program name the parser's messages use.
	Prog string

	byName map[string]*Flag
}

// Spec is the contract's ENGINE@VERSION.
func (c *Contract) Spec() string { return c.Engine + "@" + c.Version }

// Flag returns the flag spelled name (its name or an alias), or nil.
func (c *Contract) Flag(name string) *Flag { return c.byName[name] }

// Status is the exit status the engine ends with when its parser rejects
// the command line.
func (c *Contract) Status() int { return c.Kind.exitStatus() }

// progs are the program names the parsers' messages use when the contract
// does not say (header field prog): the engine's executable as started.
var progs = map[string]string{
	"tgi":      "text-generation-launcher",
	"llamacpp": "llama-server",
	"vllm":     "vllm serve",
	"sglang":   "sglang serve",
}

// Engines lists the engines that have a contract, sorted.
func Engines() []string {
	ents, _ := files.ReadDir(".")
	var out []string
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), ".txt"); ok {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// ErrNoContract is returned for an engine or version with no contract.
var ErrNoContract = errors.New("no contract")

// Load returns the embedded contract of engine (its file is ENGINE.txt).
// Each file is parsed once, when the package is initialised; the Contract
// returned is shared and must not be changed.
func Load(engine string) (*Contract, error) {
	l, ok := loaded[engine]
	if !ok {
		return nil, fmt.Errorf("%w for engine %q (have %s)", ErrNoContract, engine, strings.Join(Engines(), ", "))
	}
	return l.c, l.err
}

type loadResult struct {
	c   *Contract
	err error
}

// loaded holds every embedded contract, parsed (or its error) by engine.
var loaded = loadAll()

func loadAll() map[string]loadResult {
	out := map[string]loadResult{}
	for _, engine := range Engines() {
		name := engine + ".txt"
		data, err := files.ReadFile(name)
		if err != nil {
			out[engine] = loadResult{err: err}
			continue
		}
		c, err := Parse(name, data)
		switch {
		case err != nil:
			out[engine] = loadResult{err: err}
		case c.Engine != engine:
			out[engine] = loadResult{err: fmt.Errorf("%s:%d: engine %q, but the file is named for %q", name, c.HeaderLine["engine"], c.Engine, engine)}
		default:
			out[engine] = loadResult{c: c}
		}
	}
	return out
}

// Lookup returns the contract named by spec: ENGINE or ENGINE@VERSION (a
// leading "v" of the version is optional either side: vllm@0.11.0 and
// vllm@v0.11.0 are the same).
func Lookup(spec string) (*Contract, error) {
	engine, version, hasVersion := strings.Cut(spec, "@")
	c, err := Load(engine)
	if err != nil {
		return nil, err
	}
	if hasVersion && strings.TrimPrefix(version, "v") != strings.TrimPrefix(c.Version, "v") {
		return nil, fmt.Errorf("%w for %s: the pinned contract is %s", ErrNoContract, spec, c.Spec())
	}
	return c, nil
}

// All loads every embedded contract, sorted by engine.
func All() ([]*Contract, error) {
	var out []*Contract
	var errs []error
	for _, e := range Engines() {
		c, err := Load(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, c)
	}
	return out, errors.Join(errs...)
}

// Parse reads a contract file; name is used in errors (name:line: ...).
func Parse(name string, data []byte) (*Contract, error) {
	c := &Contract{
		File:       path.Base(name),
		Header:     map[string]string{},
		HeaderLine: map[string]int{},
		byName:     map[string]*Flag{},
	}
	var errs []error
	bad := func(line int, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, args...)))
	}
	inHeader := true
	var source, decl string
	var notes []string
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		line = strings.TrimSuffix(line, "\r")
		switch {
		case strings.TrimSpace(line) == "":
			continue
		case strings.HasPrefix(line, "#"):
			text := strings.TrimSpace(strings.TrimPrefix(line, "#"))
			// "# path/file.ext:LINE [declaration]" names the next flag's
			// source; the first one ends the header.
			where, rest, _ := strings.Cut(text, " ")
			if isSourceRef(where) {
				inHeader = false
				source, decl = where, strings.TrimSpace(rest)
				continue
			}
			key, val, ok := strings.Cut(text, ":")
			if inHeader && ok && isKey(key) {
				if _, dup := c.Header[key]; dup {
					bad(n, "header field %q given twice (first at line %d)", key, c.HeaderLine[key])
					continue
				}
				c.Header[key] = strings.TrimSpace(val)
				c.HeaderLine[key] = n
				continue
			}
			if !inHeader {
				notes = append(notes, text)
			}
			continue
		}
		inHeader = false
		f, err := parseFlag(line, n)
		if err != nil {
			bad(n, "%v", err)
			continue
		}
		f.Source, f.Decl = source, decl
		f.Required, f.Removed, f.Int = flagNotes(notes)
		f.Choices = choicesNote(notes)
		source, decl, notes = "", "", nil
		for _, s := range f.Names() {
			if prev, dup := c.byName[s]; dup {
				bad(n, "%s is already a spelling of %s (line %d)", s, prev.Name, prev.Line)
				continue
			}
			c.byName[s] = f
		}
		c.Flags = append(c.Flags, f)
	}
	for _, k := range []string{"engine", "version", "parser"} {
		if c.Header[k] == "" {
			bad(1, "no %q header field (# %s: ...)", k, k)
		}
	}
	c.Engine, c.Version, c.Commit, c.Parser = c.Header["engine"], c.Header["version"], c.Header["commit"], c.Header["parser"]
	if c.Parser != "" {
		k, err := parserKind(c.Parser)
		if err != nil {
			bad(c.HeaderLine["parser"], "%v", err)
		}
		c.Kind = k
	}
	c.Prog = c.Header["prog"]
	if c.Prog == "" {
		c.Prog = progs[c.Engine]
	}
	if c.Prog == "" {
		c.Prog = c.Engine
	}
	if len(c.Flags) == 0 {
		bad(1, "no flag lines")
	}
	if _, ok := argparseLayouts[c.Engine]; c.Kind == Argparse && !ok {
		bad(c.HeaderLine["parser"], "no argparse layout for engine %q (engine/contract/argparse.go)", c.Engine)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// parseFlag reads FLAG<TAB>ARITY<TAB>REPEAT<TAB>ALIASES[<TAB>ENV].
func parseFlag(line string, n int) (*Flag, error) {
	cols := strings.Split(line, "\t")
	if len(cols) != 4 && len(cols) != 5 {
		return nil, fmt.Errorf("want FLAG, ARITY, REPEAT, ALIASES and optionally ENV separated by tabs, got %d columns", len(cols))
	}
	f := &Flag{Name: cols[0], Arity: Arity(cols[1]), Repeat: Repeat(cols[2]), Line: n}
	if !isFlagName(f.Name) {
		return nil, fmt.Errorf("flag %q: want -x or --name", f.Name)
	}
	if !f.Arity.valid() {
		return nil, fmt.Errorf("%s: arity %q: want 0, 1, 2, ?, + or *", f.Name, cols[1])
	}
	switch f.Repeat {
	case RepeatNo, RepeatLast, RepeatAppend:
	default:
		return nil, fmt.Errorf("%s: repeat %q: want no, last or append", f.Name, cols[2])
	}
	if cols[3] != "-" {
		for a := range strings.SplitSeq(cols[3], ",") {
			if !isFlagName(a) {
				return nil, fmt.Errorf("%s: alias %q: want -x or --name", f.Name, a)
			}
			f.Aliases = append(f.Aliases, a)
		}
	}
	if len(cols) == 5 && cols[4] != "-" {
		if cols[4] == "" || strings.ContainsAny(cols[4], " =") {
			return nil, fmt.Errorf("%s: env %q: want a variable name or -", f.Name, cols[4])
		}
		f.Env = cols[4]
	}
	return f, nil
}

// flagNotes reads the comments above a flag for the notes that change how
// it parses: required, removed (with the message quoted in it), and an int
// value.
func flagNotes(notes []string) (required bool, removed string, isInt bool) {
	for _, n := range notes {
		for _, tag := range []string{"unsure:", "note:"} {
			n = strings.TrimSpace(strings.TrimPrefix(n, tag))
		}
		switch {
		case strings.HasPrefix(n, "required:"):
			required = true
		case strings.HasPrefix(n, "value: int"):
			isInt = true
		case strings.HasPrefix(n, "removed flag:"):
			removed = "removed"
			if _, q, ok := strings.Cut(n, "('"); ok {
				q, _, _ = strings.Cut(q, "')")
				removed = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(q), "..."))
			}
		}
	}
	return required, removed, isInt
}

// choicesNote reads "choices A,B,C" from a "value:" note above a flag.
func choicesNote(notes []string) []string {
	for _, n := range notes {
		for _, tag := range []string{"unsure:", "note:"} {
			n = strings.TrimSpace(strings.TrimPrefix(n, tag))
		}
		rest, ok := strings.CutPrefix(n, "value:")
		if !ok {
			continue
		}
		if _, list, ok := strings.Cut(rest, "choices "); ok {
			list, _, _ = strings.Cut(strings.TrimSpace(list), " ")
			return strings.Split(list, ",")
		}
	}
	return nil
}

func parserKind(p string) (Kind, error) {
	l := strings.ToLower(p)
	switch {
	case strings.HasPrefix(l, "clap"):
		return Clap, nil
	case strings.HasPrefix(l, "llama.cpp"):
		return LlamaCpp, nil
	case strings.Contains(l, "argparse"):
		return Argparse, nil
	}
	return 0, fmt.Errorf("parser %q: want one that starts with clap or llama.cpp, or names argparse", p)
}

func isKey(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '_' {
			return false
		}
	}
	return true
}

// isSourceRef reports whether s is path/file.ext:LINE.
func isSourceRef(s string) bool {
	file, line, ok := strings.Cut(s, ":")
	if strings.ContainsAny(file, " {}") {
		return false
	}
	if !ok || !strings.Contains(file, ".") || line == "" {
		return false
	}
	for _, r := range line {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func isFlagName(s string) bool {
	if len(s) < 2 || s[0] != '-' || s == "--" || strings.ContainsAny(s, " \t=,") {
		return false
	}
	return true
}
