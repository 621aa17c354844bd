package contract

import "strings"

// walkClap walks an argv as clap reads a command with no positionals and
// no subcommands (TGI's launcher): long flags exactly (clap abbreviates
// only with infer_long_args, which TGI does not set) as "--flag value" or
// "--flag=value"; short flags as "-p 80", "-p80" or "-p=80"; clusters of
// switches (-abc). A token that starts with '-' is never a value. It
// refuses an unknown flag or stray word, a flag without its value, a value
// given to a switch, and a second occurrence of a flag that does not
// append. Messages are the first line clap prints.
func (c *Contract) walkClap(args []string) (*Parsed, *Error) {
	p := &Parsed{}
	seen := map[*Flag]bool{}
	fail := func(kind ErrorKind, arg string, f *Flag, msg string) (*Parsed, *Error) {
		return nil, &Error{Kind: kind, Arg: arg, Flag: f, Message: "error: " + msg}
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		var (
			f        *Flag
			val      string
			hasVal   bool
			switches []*Flag // a cluster's switches before f
		)
		switch {
		case arg == "--":
			if i+1 < len(args) {
				return fail(Unknown, args[i+1], nil, "unexpected argument '"+args[i+1]+"' found")
			}
			continue
		case strings.HasPrefix(arg, "--"):
			var name string
			name, val, hasVal = strings.Cut(arg, "=")
			if f = c.byName[name]; f == nil {
				return fail(Unknown, arg, nil, "unexpected argument '"+name+"' found")
			}
		case len(arg) > 1 && arg[0] == '-':
			// -x, -xVALUE, -x=VALUE, -abc.
			for j := 1; j < len(arg); j++ {
				g := c.byName["-"+arg[j:j+1]]
				if g == nil {
					return fail(Unknown, arg, nil, "unexpected argument '-"+arg[j:j+1]+"' found")
				}
				if g.Arity.Max() != 0 && j+1 < len(arg) {
					f, val, hasVal = g, strings.TrimPrefix(arg[j+1:], "="), true
					break
				}
				if j+1 == len(arg) {
					f = g
					break
				}
				switches = append(switches, g)
			}
		default:
			return fail(Unknown, arg, nil, "unexpected argument '"+arg+"' found")
		}
		o := Occurrence{Flag: f, Given: arg, Index: i}
		switch {
		case hasVal && f.Arity.Max() == 0:
			return fail(UnexpectedValue, arg, f, "unexpected value '"+val+"' for '"+display(f)+"' found; no more were expected")
		case hasVal:
			o.Values = []string{val}
		default:
			for i+1 < len(args) && (args[i+1] == "-" || !strings.HasPrefix(args[i+1], "-")) && (f.Arity.Max() < 0 || len(o.Values) < f.Arity.Max()) {
				i++
				o.Values = append(o.Values, args[i])
			}
		}
		if len(o.Values) < f.Arity.Min() {
			return fail(MissingValue, arg, f, "a value is required for '"+display(f)+"' but none was supplied")
		}
		for _, g := range append(switches, f) {
			if seen[g] && g.Repeat != RepeatAppend {
				return fail(Repeated, arg, g, "the argument '"+display(g)+"' cannot be used multiple times")
			}
			seen[g] = true
			if g != f {
				p.Flags = append(p.Flags, Occurrence{Flag: g, Given: arg, Index: i})
			}
		}
		p.Flags = append(p.Flags, o)
		if f.Name == "--help" || f.Name == "--version" {
			return p, nil // clap prints and exits
		}
	}
	return p, nil
}

// display is clap's rendering of an argument in its messages: --port
// <PORT>, or --name alone for a switch.
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
