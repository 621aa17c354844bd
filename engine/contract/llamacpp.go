package contract

import "strings"

// walkLlamaCpp walks an argv as llama.cpp's common_params_parse_ex does:
// every token must be an option's name (with '_' read as '-' in tokens that
// start with "--"; no --flag=value), and an option takes the next one or two
// tokens as its values whatever they look like. Repeats are never errors.
func (c *Contract) walkLlamaCpp(args []string) (*Parsed, *Error) {
	p := &Parsed{}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if strings.HasPrefix(arg, "--") {
			arg = strings.ReplaceAll(arg, "_", "-")
		}
		f := c.byName[arg]
		if f == nil {
			msg := "error: invalid argument: " + arg
			return nil, &Error{Kind: Unknown, Arg: args[i], Message: msg, Stderr: msg + "\n"}
		}
		o := Occurrence{Flag: f, Given: args[i], Index: i}
		n := f.Arity.Min()
		if i+n >= len(args) {
			// The exception names the argument as normalised, and the usage
			// block shows the option's declaration (its help text is not part
			// of the contract).
			msg := "error while handling argument \"" + arg + "\": expected value for argument"
			decl := f.Decl
			if decl == "" {
				decl = strings.Join(f.Names(), ", ")
			}
			return nil, &Error{Kind: MissingValue, Arg: args[i], Flag: f, Message: msg,
				Stderr: msg + "\n\nusage:\n" + decl + "\n\n\nto show complete usage, run with -h\n"}
		}
		o.Values = append(o.Values, args[i+1:i+1+n]...)
		i += n
		p.Flags = append(p.Flags, o)
		if f.Name == "--version" {
			// --version prints and exits inside the loop.
			return p, nil
		}
	}
	return p, nil
}
