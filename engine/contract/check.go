package contract

import (
	"fmt"
	"strings"

	"github.com/llmgw/llmgw/internal/suggest"
)

// ErrorKind says what a parser rejected.
type ErrorKind int

// Error kinds.
const (
	// Unknown: a flag (or bare word) the parser does not know.
	Unknown ErrorKind = iota + 1
	// Repeated: a flag given twice that may not repeat.
	Repeated
	// MissingValue: a flag without the values it needs.
	MissingValue
	// UnexpectedValue: a value given to a flag that takes none.
	UnexpectedValue
	// BadValue: a value the flag's own parsing refuses (llama.cpp's
	// std::stoi of an int option).
	BadValue
)

func (k ErrorKind) String() string {
	switch k {
	case Unknown:
		return "unknown"
	case Repeated:
		return "repeated"
	case MissingValue:
		return "missing value"
	case UnexpectedValue:
		return "unexpected value"
	case BadValue:
		return "bad value"
	}
	return fmt.Sprintf("ErrorKind(%d)", int(k))
}

// Error is a command line the engine's parser rejects.
type Error struct {
	Kind ErrorKind
	// Arg is the argument at fault, as given.
	Arg string
	// Flag is the flag concerned, when the parser knew it; nil for an
	// unknown argument.
	Flag *Flag
	// Message is the line that says what is wrong, in the shape of the
	// parser's own (the first line it prints).
	Message string
	// Stderr is what fake-engine --strict prints for the error, ending in
	// a newline: Message, and for llama.cpp the usage block the real
	// server prints after it.
	Stderr string
	// Status is the engine's exit status.
	Status int
	// Hint is "did you mean ...?" for an unknown flag near a known one
	// (internal/suggest), or "".
	Hint string
}

func (e *Error) Error() string { return e.Message }

// Occurrence is one flag on a command line.
type Occurrence struct {
	Flag *Flag
	// Given is the spelling used (an alias, --x_y).
	Given string
	// Values are the flag's value tokens.
	Values []string
	// Index is the flag's position in the argument list.
	Index int
}

// Parsed is a command line as the parser read it.
type Parsed struct {
	// Positionals are the bare words the parser took as positional
	// arguments (argparse's subcommand and its positionals), in order.
	Positionals []string
	// Flags are the flags in command-line order.
	Flags []Occurrence
}

// Check reports whether the engine's parser accepts args (the arguments
// after the program name), with an *Error in the parser's shape when not.
func (c *Contract) Check(args []string) error {
	_, err := c.Walk(args)
	return err
}

// Walk parses args as the engine's parser would and returns what it read,
// or an *Error where the parser would fail. It checks the command line's
// shape (known flags, value counts, repeats), not values: types and choices
// are not part of the contract, except llama.cpp's int values. Where it
// cannot tell (an argparse abbreviation) it accepts: it errs toward letting
// through a line the engine might refuse, never refusing one it runs.
func (c *Contract) Walk(args []string) (*Parsed, error) {
	var (
		p   *Parsed
		err *Error
	)
	switch c.Kind {
	case Clap:
		p, err = c.walkClap(args)
	case LlamaCpp:
		p, err = c.walkLlamaCpp(args)
	case Argparse:
		p, err = c.walkArgparse(args)
	default:
		return nil, fmt.Errorf("%s: no walker for parser kind %s", c.File, c.Kind)
	}
	if err != nil {
		err.Status = c.Status()
		if err.Stderr == "" {
			err.Stderr = err.Message
		}
		if !strings.HasSuffix(err.Stderr, "\n") {
			err.Stderr += "\n"
		}
		if name, _, _ := strings.Cut(err.Arg, "="); err.Kind == Unknown && err.Flag == nil && strings.HasPrefix(name, "-") {
			err.Hint = suggest.Hint(name, c.spellings())
		}
		return nil, err
	}
	return p, nil
}

// spellings are every flag's names, for hints.
func (c *Contract) spellings() []string {
	out := make([]string, 0, len(c.byName))
	for n := range c.byName {
		out = append(out, n)
	}
	return out
}
