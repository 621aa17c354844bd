package contract

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// argparseLayout is what an argparse engine's contract says in prose and
// this package needs as data: the parsers' programs, the subcommand and
// positionals, and the rewriting done before argparse runs. TestArgparse
// Layouts checks each one against its contract's header.
type argparseLayout struct {
	// prog is the parser that parses the flags (its errors say "prog:
	// error: ..."); topProg the one that reports unrecognized arguments.
	prog, topProg string
	// usage and topUsage are the first words of the usage text argparse
	// prints before an error line.
	usage, topUsage string
	// subcommand must come first; its parser then parses the rest.
	subcommand string
	// positionals are the subcommand parser's positional arguments.
	positionals []positional
	// flexible applies vLLM's FlexibleArgumentParser.parse_args rewrites.
	flexible bool
	// notOptions are contract aliases that are rewritten before argparse
	// runs rather than registered with it.
	notOptions []string
}

type positional struct {
	name  string
	arity Arity
}

var argparseLayouts = map[string]argparseLayout{
	// vllm/entrypoints/cli/main.py: FlexibleArgumentParser "vllm" with a
	// "serve" subparser whose usage is "vllm serve [model_tag] [options]".
	"vllm": {
		prog: "vllm serve", topProg: "vllm",
		usage: "usage: vllm serve [model_tag] [options]", topUsage: "usage: vllm [-h] [-v] ...",
		subcommand:  "serve",
		positionals: []positional{{name: "model_tag", arity: "?"}},
		flexible:    true,
		notOptions:  []string{"-O"},
	},
	// python/sglang/srt/server_args.py prepare_server_args:
	// argparse.ArgumentParser(prog="sglang serve"), no rewriting.
	"sglang": {
		prog: "sglang serve", topProg: "sglang serve",
		usage: "usage: sglang serve [-h] ...", topUsage: "usage: sglang serve [-h] ...",
	},
}

// argparser is one ArgumentParser: its option strings in registration
// order (-h/--help first, as add_help registers them) and its positionals.
type argparser struct {
	c           *Contract
	l           argparseLayout
	opts        map[string]*Flag
	order       []string
	allowAbbrev bool
	negOptions  bool // some option string looks like a negative number
	// partial[i] matches the first i+1 positionals (_match_arguments_partial).
	partial []*regexp.Regexp
}

var negativeNumber = regexp.MustCompile(`^-\d+$|^-\d*\.\d+$`)

func (c *Contract) argparser() (*argparser, error) {
	l, ok := argparseLayouts[c.Engine]
	if !ok {
		return nil, fmt.Errorf("no argparse layout for engine %q (engine/contract/argparse.go)", c.Engine)
	}
	a := &argparser{c: c, l: l, opts: map[string]*Flag{}, allowAbbrev: !strings.Contains(c.Header["allow_abbrev"], "False")}
	add := func(f *Flag) {
		for _, n := range f.Names() {
			if slices.Contains(l.notOptions, n) {
				continue
			}
			a.opts[n] = f
			a.order = append(a.order, n)
			if negativeNumber.MatchString(n) {
				a.negOptions = true
			}
		}
	}
	for i := range l.positionals {
		var b strings.Builder
		b.WriteString("^")
		for _, p := range l.positionals[:i+1] {
			b.WriteString(nargsPattern(p.arity))
		}
		a.partial = append(a.partial, regexp.MustCompile(b.String()))
	}
	if h := c.Flag("--help"); h != nil {
		add(h)
	}
	for _, f := range c.Flags {
		if f.Name != "--help" {
			add(f)
		}
	}
	return a, nil
}

// walkArgparse walks an argv as CPython 3.12's argparse does, after the
// engine's own rewriting (vLLM's FlexibleArgumentParser): option strings,
// --flag=value, unique prefixes of long options (allow_abbrev), clusters of
// single-dash switches, nargs 0/1/?/+/* counted over the arguments that do
// not look like options, positionals, required options; unknown arguments
// are collected and reported together at the end.
func (c *Contract) walkArgparse(args []string) (*Parsed, *Error) {
	a := c.ap
	l := a.l
	if l.flexible {
		var e *Error
		if args, e = vllmRewrite(args); e != nil {
			return nil, e
		}
	}
	p := &Parsed{}
	if l.subcommand != "" {
		switch {
		case len(args) > 0 && args[0] == l.subcommand:
			p.Positionals = append(p.Positionals, args[0])
			args = args[1:]
		case len(args) > 0 && (args[0] == "-h" || args[0] == "--help"):
			return p, nil
		default:
			first := ""
			if len(args) > 0 {
				first = args[0]
			}
			msg := l.topProg + ": error: argument subparser: invalid choice: " + pyRepr(first) + " (choose from ..., " + pyRepr(l.subcommand) + ", ...)"
			return nil, &Error{Kind: Unknown, Arg: first, Message: msg, Stderr: l.topUsage + "\n" + msg}
		}
	}
	extras, e := a.parseKnown(args, p)
	if e != nil {
		return nil, e
	}
	if len(extras) > 0 {
		msg := l.topProg + ": error: unrecognized arguments: " + strings.Join(extras, " ")
		return nil, &Error{Kind: Unknown, Arg: extras[0], Message: msg, Stderr: l.topUsage + "\n" + msg}
	}
	return p, nil
}

// optTuple is argparse's reading of an argument that looks like an option:
// its action (nil: unknown), the option string it stands for and the value
// attached to it (after '=', or after a single-dash short option).
type optTuple struct {
	f        *Flag
	opt      string
	explicit *string
}

func (a *argparser) fail(kind ErrorKind, arg string, f *Flag, msg string) *Error {
	line := a.l.prog + ": error: " + msg
	return &Error{Kind: kind, Arg: arg, Flag: f, Message: line, Stderr: a.l.usage + "\n" + line}
}

func (a *argparser) argError(kind ErrorKind, arg string, f *Flag, msg string) *Error {
	return a.fail(kind, arg, f, "argument "+strings.Join(f.Names(), "/")+": "+msg)
}

// parseOptional is ArgumentParser._parse_optional: nil for a positional
// word, else what option it is.
func (a *argparser) parseOptional(arg string) (*optTuple, *Error) {
	if arg == "" || arg[0] != '-' {
		return nil, nil
	}
	if f := a.opts[arg]; f != nil {
		return &optTuple{f: f, opt: arg}, nil
	}
	if len(arg) == 1 {
		return nil, nil
	}
	if name, val, ok := strings.Cut(arg, "="); ok {
		if f := a.opts[name]; f != nil {
			return &optTuple{f: f, opt: name, explicit: &val}, nil
		}
	}
	tuples := a.optionTuples(arg)
	if len(tuples) > 1 {
		var names []string
		for _, t := range tuples {
			names = append(names, t.opt)
		}
		return nil, a.fail(Ambiguous, arg, nil, "ambiguous option: "+arg+" could match "+strings.Join(names, ", "))
	}
	if len(tuples) == 1 {
		return &tuples[0], nil
	}
	if negativeNumber.MatchString(arg) && !a.negOptions {
		return nil, nil
	}
	if strings.Contains(arg, " ") {
		return nil, nil
	}
	return &optTuple{opt: arg}, nil
}

// optionTuples is ArgumentParser._get_option_tuples: the options a prefix
// may stand for.
func (a *argparser) optionTuples(arg string) []optTuple {
	var out []optTuple
	if arg[1] == '-' {
		if !a.allowAbbrev {
			return nil
		}
		prefix, val, hasVal := strings.Cut(arg, "=")
		for _, o := range a.order {
			if strings.HasPrefix(o, prefix) {
				t := optTuple{f: a.opts[o], opt: o}
				if hasVal {
					t.explicit = &val
				}
				out = append(out, t)
			}
		}
		return out
	}
	short, rest := arg[:2], arg[2:]
	for _, o := range a.order {
		switch {
		case o == short:
			v := rest
			out = append(out, optTuple{f: a.opts[o], opt: o, explicit: &v})
		case strings.HasPrefix(o, arg):
			out = append(out, optTuple{f: a.opts[o], opt: o})
		}
	}
	return out
}

// matchArgument is ArgumentParser._match_argument for an option: how many
// of the arguments that follow (pattern: 'A' for a word, 'O' for an option,
// '-' for "--") the flag takes.
func (a *argparser) matchArgument(f *Flag, pattern string) (int, string) {
	words := len(pattern) - len(strings.TrimLeft(pattern, "A"))
	switch f.Arity {
	case "0":
		return 0, ""
	case "?":
		return min(words, 1), ""
	case "*":
		return words, ""
	case "+":
		if words == 0 {
			return 0, "expected at least one argument"
		}
		return words, ""
	}
	n := f.Arity.Min()
	if words < n {
		if n == 1 {
			return 0, "expected one argument"
		}
		return 0, "expected " + strconv.Itoa(n) + " arguments"
	}
	return n, ""
}

// parseKnown is ArgumentParser._parse_known_args: it consumes options and
// positionals in turn and returns the arguments it did not recognise.
func (a *argparser) parseKnown(args []string, p *Parsed) ([]string, *Error) {
	// Every argument is classified first, so an ambiguous prefix fails
	// before anything is consumed.
	tuples := map[int]*optTuple{}
	pattern := make([]byte, len(args))
	var optIdx []int
	for i, arg := range args {
		if arg == "--" {
			pattern[i] = '-'
			for j := i + 1; j < len(args); j++ {
				pattern[j] = 'A'
			}
			break
		}
		t, err := a.parseOptional(arg)
		if err != nil {
			return nil, err
		}
		if t == nil {
			pattern[i] = 'A'
			continue
		}
		tuples[i] = t
		pattern[i] = 'O'
		optIdx = append(optIdx, i)
	}
	pat := string(pattern)
	positionals := slices.Clone(a.l.positionals)
	seen := map[*Flag]bool{}
	var extras []string

	take := func(f *Flag, given string, values []string, index int) (bool, *Error) {
		seen[f] = true
		p.Flags = append(p.Flags, Occurrence{Flag: f, Given: given, Values: values, Index: index})
		if f.Removed != "" {
			msg := strings.TrimPrefix(f.Removed, a.l.prog+": error: ")
			return false, a.fail(Unknown, given, f, msg)
		}
		return f.Name == "--help", nil
	}
	consumePositionals := func(start int) int {
		counts := a.matchPartial(len(positionals), pat[start:])
		for _, n := range counts {
			vals := slices.DeleteFunc(slices.Clone(args[start:start+n]), func(s string) bool { return s == "--" })
			p.Positionals = append(p.Positionals, vals...)
			start += n
		}
		positionals = positionals[len(counts):]
		return start
	}
	consumeOptional := func(start int) (int, bool, *Error) {
		t := tuples[start]
		f, opt, explicit := t.f, t.opt, t.explicit
		type act struct {
			f      *Flag
			values []string
			opt    string
		}
		var acts []act
		stop := start + 1
		for {
			if f == nil {
				extras = append(extras, args[start])
				return start + 1, false, nil
			}
			if explicit != nil {
				n, msg := a.matchArgument(f, "A")
				if msg != "" {
					return 0, false, a.argError(MissingValue, args[start], f, msg)
				}
				if n == 0 && opt[1] != '-' && *explicit != "" {
					// A cluster of single-dash switches: -xyz.
					acts = append(acts, act{f, nil, opt})
					opt = opt[:1] + (*explicit)[:1]
					var next *string
					if rest := (*explicit)[1:]; rest != "" {
						next = &rest
					}
					g := a.opts[opt]
					if g == nil {
						return 0, false, a.argError(UnexpectedValue, args[start], f, "ignored explicit argument "+pyRepr(*explicit))
					}
					f, explicit = g, next
					continue
				}
				if n == 1 {
					acts = append(acts, act{f, []string{*explicit}, opt})
					break
				}
				return 0, false, a.argError(UnexpectedValue, args[start], f, "ignored explicit argument "+pyRepr(*explicit))
			}
			n, msg := a.matchArgument(f, pat[start+1:])
			if msg != "" {
				return 0, false, a.argError(MissingValue, args[start], f, msg)
			}
			stop = start + 1 + n
			acts = append(acts, act{f, slices.Clone(args[start+1 : stop]), opt})
			break
		}
		for _, x := range acts {
			if exit, err := take(x.f, x.opt, x.values, start); err != nil || exit {
				return 0, exit, err
			}
		}
		return stop, false, nil
	}

	start := 0
	maxOpt := -1
	if len(optIdx) > 0 {
		maxOpt = optIdx[len(optIdx)-1]
	}
	for start <= maxOpt {
		next := -1
		for _, i := range optIdx {
			if i >= start {
				next = i
				break
			}
		}
		if start != next {
			end := consumePositionals(start)
			if end > start {
				start = end
				continue
			}
			start = end
		}
		if _, ok := tuples[start]; !ok {
			extras = append(extras, args[start:next]...)
			start = next
		}
		var (
			exit bool
			err  *Error
		)
		if start, exit, err = consumeOptional(start); err != nil {
			return nil, err
		} else if exit {
			return nil, nil
		}
	}
	stop := consumePositionals(start)
	extras = append(extras, args[stop:]...)

	var missing []string
	for _, o := range a.order {
		if f := a.opts[o]; f.Required && !seen[f] && o == f.Name {
			missing = append(missing, strings.Join(f.Names(), "/"))
		}
	}
	if len(missing) > 0 {
		return nil, a.fail(MissingValue, "", nil, "the following arguments are required: "+strings.Join(missing, ", "))
	}
	return extras, nil
}

// nargsPattern is argparse's _get_nargs_pattern for a positional.
func nargsPattern(ar Arity) string {
	switch ar {
	case "?":
		return "(-*A?-*)"
	case "*":
		return "(-*[A-]*)"
	case "+":
		return "(-*A[A-]*)"
	case "0":
		return "(-*-*)"
	}
	return "(-*" + strings.Repeat("A", max(ar.Min(), 1)) + "-*)"
}

// matchPartial is ArgumentParser._match_arguments_partial over the
// last n positionals not yet consumed: as many of them as can match, and
// how many arguments each takes.
func (a *argparser) matchPartial(n int, pattern string) []int {
	// Positionals are consumed in order, so the ones left are the last n.
	off := len(a.l.positionals) - n
	for i := n; i > 0; i-- {
		var m []string
		if off == 0 {
			m = a.partial[i-1].FindStringSubmatch(pattern)
		} else {
			var b strings.Builder
			b.WriteString("^")
			for _, p := range a.l.positionals[off : off+i] {
				b.WriteString(nargsPattern(p.arity))
			}
			m = regexp.MustCompile(b.String()).FindStringSubmatch(pattern)
		}
		if m == nil {
			continue
		}
		out := make([]int, 0, i)
		for _, g := range m[1:] {
			out = append(out, len(g))
		}
		return out
	}
	return nil
}

// pyRepr is Python's repr of a str, as argparse's messages quote values.
func pyRepr(s string) string {
	q := "'"
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		q = `"`
	}
	var b strings.Builder
	b.WriteString(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case string(r) == q:
			b.WriteString(`\` + q)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteString(q)
	return b.String()
}

// vllmRewrite is what vLLM's FlexibleArgumentParser.parse_args does to the
// command line before argparse sees it (vllm/utils/argparse_utils.py):
// `serve ... --model X` moves X into the positional slot; --served-model-name
// without a positional model is a ValueError; --help=WORD becomes --help;
// in "--" arguments underscores become dashes up to the first '.'; -O<n>,
// -O=<n> and -O <0-3> become --optimization-level; dotted JSON keys
// (--x.key v, --x.key+ v) are merged into one "--x JSON" pair at the end.
// --config FILE is not expanded (no I/O here).
func vllmRewrite(args []string) ([]string, *Error) {
	pyErr := func(kind ErrorKind, arg, msg string) *Error {
		return &Error{Kind: kind, Arg: arg, Message: msg, Stderr: "Traceback (most recent call last):\n  ...\n" + msg, status: 1}
	}
	if len(args) > 0 && args[0] == "serve" {
		for i, arg := range args {
			if arg != "--model" && (!strings.HasPrefix(arg, "--model=") || arg == "--model=") {
				continue
			}
			var tag string
			rest := i + 1
			if arg == "--model" {
				if i+1 >= len(args) {
					return nil, pyErr(MissingValue, arg, "IndexError: list index out of range")
				}
				tag, rest = args[i+1], i+2
			} else {
				tag = strings.TrimPrefix(arg, "--model=")
			}
			moved := append([]string{"serve", tag}, args[1:i]...)
			args = append(moved, args[rest:]...)
			break
		}
		if len(args) > 1 && strings.HasPrefix(args[1], "-") && !slices.ContainsFunc(args, isConfigArg) && slices.ContainsFunc(args, isServedNameArg) {
			return nil, pyErr(Unknown, args[1], "ValueError: `model` should be provided as the first positional argument when using `vllm serve`. i.e. `vllm serve <model> --<arg> <value>`.")
		}
	}
	var out []string
	for i, arg := range args {
		switch {
		case strings.HasPrefix(arg, "--help="):
			out = append(out, "--help")
		case strings.HasPrefix(arg, "--"):
			key, val, hasVal := strings.Cut(arg, "=")
			name, dotted, hasDot := strings.Cut(key[2:], ".")
			key = "--" + strings.ReplaceAll(name, "_", "-")
			if hasDot {
				key += "." + dotted
			}
			if hasVal {
				key += "=" + val
			}
			out = append(out, key)
		case strings.HasPrefix(arg, "-O") && arg != "-O":
			out = append(out, "--optimization-level", strings.TrimPrefix(arg[2:], "="))
		case arg == "-O" && i+1 < len(args) && slices.Contains([]string{"0", "1", "2", "3"}, args[i+1]):
			out = append(out, "--optimization-level")
		default:
			out = append(out, arg)
		}
	}
	// Dotted JSON keys.
	type dict struct {
		key string
		val map[string]any
	}
	var dicts []*dict
	byKey := map[string]*dict{}
	del := map[int]bool{}
	for i, arg := range out {
		if del[i] || !strings.HasPrefix(arg, "-") || !strings.Contains(arg, ".") {
			continue
		}
		name, val, hasVal := strings.Cut(arg, "=")
		if hasVal && !strings.Contains(name, ".") {
			continue
		}
		if !hasVal {
			if i+1 >= len(out) {
				return nil, pyErr(MissingValue, arg, "IndexError: list index out of range")
			}
			val = out[i+1]
			del[i+1] = true
		}
		var v any = val
		if list, ok := strings.CutSuffix(name, "+"); ok {
			name, v = list, strings.Split(val, ",")
		} else if json.Valid([]byte(val)) {
			v = json.RawMessage(val)
		}
		parts := strings.Split(name, ".")
		d := byKey[parts[0]]
		if d == nil {
			d = &dict{key: parts[0], val: map[string]any{}}
			byKey[parts[0]] = d
			dicts = append(dicts, d)
		}
		m := d.val
		for _, k := range parts[1 : len(parts)-1] {
			sub, ok := m[k].(map[string]any)
			if !ok {
				sub = map[string]any{}
				m[k] = sub
			}
			m = sub
		}
		m[parts[len(parts)-1]] = v
		del[i] = true
	}
	var kept []string
	for i, arg := range out {
		if !del[i] {
			kept = append(kept, arg)
		}
	}
	for _, d := range dicts {
		js, _ := json.Marshal(d.val)
		kept = append(kept, d.key, string(js))
	}
	return kept, nil
}

var (
	configArg    = regexp.MustCompile(`^--config(=.+|$)`)
	servedNameRe = regexp.MustCompile(`^--served[-_]model[-_]name(=.+|$)`)
)

func isConfigArg(s string) bool     { return configArg.MatchString(s) }
func isServedNameArg(s string) bool { return servedNameRe.MatchString(s) }
