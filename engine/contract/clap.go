package contract

import (
	"slices"
	"strings"
)

// clap walks an argv as clap_builder 4.5's Parser does for a command with
// no positionals and no subcommands (TGI's launcher): long flags with
// "--flag value" or "--flag=value", short flags with "-p 80", "-p80" or
// "-p=80" and clusters of switches, no abbreviations. A flag's pending value
// is resolved (checked for a value, then for a repeat) when the next flag
// reacts or the command line ends; an unknown argument is reported at once,
// ahead of whatever the pending flag lacks.
type clap struct {
	c       *Contract
	p       *Parsed
	pending *Occurrence
	// open is true while the pending flag still takes value tokens.
	open bool
	// used are the flags that have reacted, in order (clap's ArgMatcher),
	// which the "Usage:" line of some errors lists.
	used []*Flag
	seen map[*Flag]bool
}

func (c *Contract) walkClap(args []string) (*Parsed, *Error) {
	s := &clap{c: c, p: &Parsed{}, seen: map[*Flag]bool{}}
	trailing := false
	for i, arg := range args {
		switch {
		case trailing:
			s.resolve()
			return nil, s.unexpected(arg, nil)
		case arg == "--":
			trailing = true
		case strings.HasPrefix(arg, "--"):
			name, val, hasEq := strings.Cut(arg, "=")
			f := c.longFlag(name)
			if f == nil {
				// Pending errors are dropped: the unknown argument wins.
				s.resolve()
				return nil, s.unknownLong(arg, name)
			}
			if f.Arity.Max() == 0 {
				if hasEq {
					used := append(slices.Clone(s.used), f)
					s.resolve()
					return nil, s.tooManyValues(val, f, used)
				}
				if exit, err := s.react(&Occurrence{Flag: f, Given: name, Index: i}); err != nil || exit {
					return s.p, err
				}
				continue
			}
			if hasEq {
				if exit, err := s.react(&Occurrence{Flag: f, Given: name, Values: []string{val}, Index: i}); err != nil || exit {
					return s.p, err
				}
				continue
			}
			if err := s.resolveErr(); err != nil {
				return nil, err
			}
			s.pending, s.open = &Occurrence{Flag: f, Given: name, Index: i}, true
		case len(arg) > 1 && arg[0] == '-':
			exit, err := s.short(arg, i)
			if err != nil || exit {
				return s.p, err
			}
		case s.open:
			s.pending.Values = append(s.pending.Values, arg)
			if m := s.pending.Flag.Arity.Max(); m >= 0 && len(s.pending.Values) >= m {
				s.open = false
			}
		default:
			s.resolve()
			return nil, s.unexpected(arg, nil)
		}
	}
	if err := s.resolveErr(); err != nil {
		return nil, err
	}
	return s.p, nil
}

// short handles -x, -xVALUE, -x=VALUE and clusters of switches -abc.
func (s *clap) short(arg string, i int) (exit bool, _ *Error) {
	rest := arg[1:]
	for rest != "" {
		ch := rest[:1]
		rest = rest[1:]
		f := s.c.Flag("-" + ch)
		if f == nil {
			s.resolve()
			return false, s.unexpected("-"+ch, nil)
		}
		if f.Arity.Max() == 0 {
			if exit, err := s.react(&Occurrence{Flag: f, Given: "-" + ch, Index: i}); err != nil || exit {
				return exit, err
			}
			continue
		}
		if rest != "" {
			return s.react(&Occurrence{Flag: f, Given: "-" + ch, Values: []string{strings.TrimPrefix(rest, "=")}, Index: i})
		}
		if err := s.resolveErr(); err != nil {
			return false, err
		}
		s.pending, s.open = &Occurrence{Flag: f, Given: "-" + ch, Index: i}, true
	}
	return false, nil
}

// react is clap's Parser::react: resolve what is pending, check the value
// count, then refuse a repeat of a flag that may not repeat. It reports
// exit when the flag prints and exits (--help, --version).
func (s *clap) react(o *Occurrence) (exit bool, _ *Error) {
	if err := s.resolveErr(); err != nil {
		return false, err
	}
	f := o.Flag
	if len(o.Values) < f.Arity.Min() {
		return false, s.missingValue(f)
	}
	if s.seen[f] && f.Repeat != RepeatAppend {
		return false, s.conflict(f)
	}
	if !s.seen[f] {
		s.seen[f] = true
		s.used = append(s.used, f)
	}
	s.p.Flags = append(s.p.Flags, *o)
	return f.Name == "--help" || f.Name == "--version", nil
}

func (s *clap) resolveErr() *Error {
	o := s.pending
	if o == nil {
		return nil
	}
	s.pending, s.open = nil, false
	_, err := s.react(o)
	return err
}

// resolve resolves what is pending and drops its error, as clap does before
// it reports an unknown argument.
func (s *clap) resolve() { _ = s.resolveErr() }

// display is clap's rendering of an argument: --port <PORT>, or --name
// alone for a switch.
func display(f *Flag) string {
	if f.Arity.Max() == 0 {
		return f.Name
	}
	v := strings.ToUpper(strings.ReplaceAll(strings.TrimLeft(f.Name, "-"), "-", "_"))
	if f.Arity.Min() == 0 {
		return f.Name + " [<" + v + ">]"
	}
	return f.Name + " <" + v + ">"
}

// usage is clap's "Usage:" line: the program and [OPTIONS], or the
// program and the arguments used so far.
func (s *clap) usage(used []*Flag) string {
	if len(used) == 0 {
		return "Usage: " + s.c.Prog + " [OPTIONS]"
	}
	var parts []string
	seen := map[*Flag]bool{}
	for _, f := range used {
		if !seen[f] {
			seen[f] = true
			parts = append(parts, display(f))
		}
	}
	return "Usage: " + s.c.Prog + " " + strings.Join(parts, " ")
}

func (s *clap) fail(kind ErrorKind, arg string, f *Flag, msg string, extra ...string) *Error {
	out := "error: " + msg
	for _, e := range extra {
		out += "\n\n" + e
	}
	out += "\n\nFor more information, try '--help'.\n"
	return &Error{Kind: kind, Arg: arg, Flag: f, Message: "error: " + msg, Stderr: out}
}

func (s *clap) unexpected(arg string, used []*Flag) *Error {
	return s.fail(Unknown, arg, nil, "unexpected argument '"+arg+"' found", s.usage(used))
}

// unknownLong is an unknown --flag: clap suggests the most similar long
// name (Jaro similarity above 0.7), and its Usage line then lists the
// arguments used so far with the suggestion.
func (s *clap) unknownLong(arg, name string) *Error {
	sugg, spelled := s.c.similarLong(strings.TrimPrefix(name, "--"))
	if sugg == nil {
		return s.unexpected(name, s.used)
	}
	used := slices.Clone(s.used)
	if !slices.Contains(used, sugg) {
		used = append(used, sugg)
	}
	return s.fail(Unknown, arg, nil, "unexpected argument '"+name+"' found",
		"  tip: a similar argument exists: '"+spelled+"'", s.usage(used))
}

func (s *clap) tooManyValues(val string, f *Flag, used []*Flag) *Error {
	return s.fail(UnexpectedValue, f.Name+"="+val, f, "unexpected value '"+val+"' for '"+display(f)+"' found; no more were expected", s.usage(used))
}

func (s *clap) missingValue(f *Flag) *Error {
	return s.fail(MissingValue, f.Name, f, "a value is required for '"+display(f)+"' but none was supplied")
}

func (s *clap) conflict(f *Flag) *Error {
	return s.fail(Repeated, f.Name, f, "the argument '"+display(f)+"' cannot be used multiple times", s.usage(nil))
}

// longFlag finds a --long spelling exactly; clap does not abbreviate
// unless infer_long_args is set, which TGI does not set.
func (c *Contract) longFlag(name string) *Flag {
	if !strings.HasPrefix(name, "--") {
		return nil
	}
	return c.byName[name]
}

// similarLong is clap's did_you_mean over every long name in declaration
// order: the most similar above 0.7, the later one on a tie. It returns the
// flag and the spelling that matched.
func (c *Contract) similarLong(name string) (best *Flag, spelled string) {
	bestScore := 0.7
	for _, f := range c.Flags {
		for _, n := range f.Names() {
			if !strings.HasPrefix(n, "--") {
				continue
			}
			if sc := jaro(name, n[2:]); sc > 0.7 && sc >= bestScore {
				bestScore, best, spelled = sc, f, n
			}
		}
	}
	return best, spelled
}
