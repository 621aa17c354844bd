package contract

import (
	"math"
	"strconv"
	"strings"
)

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
			return nil, &Error{Kind: MissingValue, Arg: args[i], Flag: f, Message: msg,
				Stderr: msg + "\n\nusage:\n" + f.declOrNames() + "\n\n\nto show complete usage, run with -h\n"}
		}
		o.Values = append(o.Values, args[i+1:i+1+n]...)
		i += n
		// The handler runs once the values are taken: a removed option's
		// throws, an int option's value goes through std::stoi.
		why := f.Removed
		if why == "" && f.Int && n == 1 && !stoiAccepts(o.Values[0]) {
			why = "stoi"
		}
		if why != "" {
			kind := BadValue
			if f.Removed != "" {
				kind = Unknown
			}
			msg := "error while handling argument \"" + arg + "\": " + why
			return nil, &Error{Kind: kind, Arg: args[i-n], Flag: f, Message: msg,
				Stderr: msg + "\n\nusage:\n" + f.declOrNames() + "\n\n\nto show complete usage, run with -h\n"}
		}
		p.Flags = append(p.Flags, o)
		if f.Name == "--version" {
			// --version prints and exits inside the loop.
			return p, nil
		}
	}
	return p, nil
}

// declOrNames is what llama.cpp's usage block shows of an option: its
// declaration (names and value hints) from the contract, else its names.
func (f *Flag) declOrNames() string {
	if f.Decl != "" {
		return f.Decl
	}
	return strings.Join(f.Names(), ", ")
}

// stoiAccepts reports whether C++'s std::stoi parses s: optional leading
// white space, an optional sign, at least one digit (what follows the
// digits is ignored), and a value that fits a 32-bit int.
func stoiAccepts(s string) bool {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	limit := int64(math.MaxInt32)
	if s != "" && (s[0] == '+' || s[0] == '-') {
		if s[0] == '-' {
			limit++
		}
		s = s[1:]
	}
	digits := 0
	for digits < len(s) && s[digits] >= '0' && s[digits] <= '9' {
		digits++
	}
	if digits == 0 {
		return false
	}
	n, err := strconv.ParseInt(s[:digits], 10, 64)
	return err == nil && n <= limit
}
