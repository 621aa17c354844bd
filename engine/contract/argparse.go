package contract

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// argparseLayout is what an argparse engine's contract says in prose and
// this package needs as data.
type argparseLayout struct {
	// prog is the program name its messages start with.
	prog string
	// subcommand, when set, must come first.
	subcommand string
	// positionals is how many optional positional words may follow.
	positionals int
	// flexible applies what vLLM's FlexibleArgumentParser does before
	// argparse runs: '_' read as '-' in "--" flags (up to the first '.'),
	// and dotted JSON keys (--compilation-config.mode 3) taking one value.
	flexible bool
}

var argparseLayouts = map[string]argparseLayout{
	// vllm/entrypoints/cli/main.py: "vllm serve [model_tag] [options]".
	"vllm": {prog: "vllm serve", subcommand: "serve", positionals: 1, flexible: true},
	// python/sglang/srt/server_args.py prepare_server_args: no rewriting.
	"sglang": {prog: "sglang serve"},
}

// negativeNumber is a token argparse reads as a value, not an option.
var negativeNumber = regexp.MustCompile(`^-\d+$|^-\d*\.\d+$`)

// isOption reports whether argparse reads tok as an option string.
func isOption(tok string) bool {
	return len(tok) > 1 && tok[0] == '-' && !negativeNumber.MatchString(tok) && !strings.Contains(tok, " ")
}

// walkArgparse walks an argv as Python's argparse reads it, kept to the
// mistakes worth catching: an unknown flag, a flag without its values, a
// value given to a switch, a stray word, a required flag missing, a flag
// the engine removed. Where argparse would accept what this walk cannot
// tell apart it accepts without checking: an abbreviation (a prefix of a
// known long flag: allow_abbrev) is not resolved, and neither are clusters
// of single-dash switches, so an ambiguous prefix argparse refuses is let
// through rather than a line the engine runs refused.
func (c *Contract) walkArgparse(args []string) (*Parsed, *Error) {
	l := argparseLayouts[c.Engine]
	fail := func(kind ErrorKind, arg string, f *Flag, msg string) *Error {
		return &Error{Kind: kind, Arg: arg, Flag: f, Message: l.prog + ": error: " + msg}
	}
	p := &Parsed{}
	if l.subcommand != "" {
		switch {
		case len(args) > 0 && args[0] == l.subcommand:
			p.Positionals, args = append(p.Positionals, args[0]), args[1:]
		case len(args) > 0 && (args[0] == "-h" || args[0] == "--help"):
			return p, nil
		default:
			first := ""
			if len(args) > 0 {
				first = args[0]
			}
			return nil, fail(Unknown, first, nil, "want "+l.subcommand+" first, got "+quote(first))
		}
	}
	positionals := l.positionals
	seen := map[*Flag]bool{}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" || !isOption(arg) {
			word := arg
			if arg == "--" {
				if i+1 == len(args) {
					break
				}
				i++
				word = args[i]
			}
			if positionals == 0 {
				return nil, fail(Unknown, word, nil, "unrecognized arguments: "+word)
			}
			positionals--
			p.Positionals = append(p.Positionals, word)
			continue
		}
		name, val, hasVal := strings.Cut(arg, "=")
		dotted := false
		if l.flexible && strings.HasPrefix(name, "--") {
			base, _, hasDot := strings.Cut(name[2:], ".")
			name, dotted = "--"+strings.ReplaceAll(base, "_", "-"), hasDot
			if name == "--help" {
				hasVal = false // --help=WORD filters the help
			}
		}
		f := c.byName[name]
		if f == nil && len(name) > 2 && name[1] != '-' && !hasVal {
			// -xVALUE: a short flag with its value attached (vLLM's -O3).
			if g := c.byName[name[:2]]; g != nil && g.Arity.Max() != 0 {
				f, val, hasVal = g, name[2:], true
			}
		}
		if f == nil {
			if c.abbreviates(name) {
				// Not checked: an abbreviation, or a cluster of switches.
				// Its values, if any, are the words that follow.
				for i+1 < len(args) && !isOption(args[i+1]) && args[i+1] != "--" {
					i++
				}
				continue
			}
			return nil, fail(Unknown, arg, nil, "unrecognized arguments: "+arg)
		}
		o := Occurrence{Flag: f, Given: name, Index: i}
		if f.Removed != "" {
			return nil, fail(Unknown, arg, f, strings.TrimPrefix(f.Removed, l.prog+": error: "))
		}
		seen[f] = true
		switch {
		case dotted:
			// A dotted JSON key takes the next token, whatever it is.
			if !hasVal {
				if i+1 == len(args) {
					return nil, fail(MissingValue, arg, f, "argument "+arg+": expected one argument")
				}
				i++
				val = args[i]
			}
			o.Values = []string{val}
		case hasVal && f.Arity.Max() == 0:
			return nil, fail(UnexpectedValue, arg, f, "argument "+strings.Join(f.Names(), "/")+": ignored explicit argument "+quote(val))
		case hasVal:
			o.Values = []string{val}
		default:
			for i+1 < len(args) && !isOption(args[i+1]) && args[i+1] != "--" && (f.Arity.Max() < 0 || len(o.Values) < f.Arity.Max()) {
				i++
				o.Values = append(o.Values, args[i])
			}
			if len(o.Values) < f.Arity.Min() {
				want := "expected one argument"
				if f.Arity == "+" {
					want = "expected at least one argument"
				} else if f.Arity.Min() > 1 {
					want = "expected 2 arguments"
				}
				return nil, fail(MissingValue, arg, f, "argument "+strings.Join(f.Names(), "/")+": "+want)
			}
		}
		if msg := argparseValues(f, o.Values); msg != "" {
			return nil, fail(BadValue, arg, f, "argument "+strings.Join(f.Names(), "/")+": "+msg)
		}
		p.Flags = append(p.Flags, o)
		if f.Name == "--help" {
			return p, nil // argparse prints the help and exits
		}
	}
	var missing []string
	for _, f := range c.Flags {
		if f.Required && !seen[f] {
			missing = append(missing, strings.Join(f.Names(), "/"))
		}
	}
	if len(missing) > 0 {
		return nil, fail(MissingValue, "", nil, "the following arguments are required: "+strings.Join(missing, ", "))
	}
	return p, nil
}

// pythonIntRE is what Python's int() takes of a string: a whole number in
// decimal, with a sign, digits grouped by single underscores, and spaces
// around it (ASCII digits only here).
var pythonIntRE = regexp.MustCompile(`^\s*[+-]?[0-9]+(_[0-9]+)*\s*$`)

// argparseValues is what argparse says of a flag's values that its type or
// choices refuse ("invalid int value: 'x'", "invalid choice: 24 (choose
// from 1, 8, 16)"), or "" when it takes them. Only for the flags the
// contract notes an int type or choices for.
func argparseValues(f *Flag, values []string) string {
	for _, v := range values {
		shown := quote(v)
		if f.Int {
			if !pythonIntRE.MatchString(v) {
				return "invalid int value: " + quote(v)
			}
			n, err := strconv.ParseInt(strings.ReplaceAll(strings.TrimSpace(v), "_", ""), 10, 64)
			if err != nil {
				return "invalid int value: " + quote(v)
			}
			shown = strconv.FormatInt(n, 10) // argparse shows the converted int's repr
			v = shown
		}
		if len(f.Choices) > 0 && !slices.Contains(f.Choices, v) {
			choices := f.Choices
			if !f.Int {
				choices = make([]string, len(f.Choices))
				for i, c := range f.Choices {
					choices[i] = quote(c)
				}
			}
			return "invalid choice: " + shown + " (choose from " + strings.Join(choices, ", ") + ")"
		}
	}
	return ""
}

// abbreviates reports whether an unknown option could be one argparse
// reads as a known one: a prefix of a long flag (allow_abbrev, argparse's
// default, which no contract turns off), or a cluster that starts with a
// short switch (-xy).
func (c *Contract) abbreviates(name string) bool {
	for n, f := range c.byName {
		switch {
		case strings.HasPrefix(name, "--") && len(name) > 2 && strings.HasPrefix(n, name):
			return true
		case name[1] != '-' && len(name) > 2 && n == name[:2] && f.Arity.Max() == 0:
			return true
		}
	}
	return false
}

// quote is how argparse's messages quote a value.
func quote(s string) string { return "'" + s + "'" }
