package contract

import (
	"fmt"
	"strings"
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
	// Ambiguous: an abbreviation that matches several flags.
	Ambiguous
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
	case Ambiguous:
		return "ambiguous"
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
	// Message is the line that says what is wrong, in the parser's words
	// (the first line it prints, or argparse's "PROG: error: ..." line).
	Message string
	// Stderr is everything the parser prints for the error, in its shape,
	// ending in a newline.
	Stderr string
	// Status is the engine's exit status.
	Status int

	// status, when not 0, is the exit status of an error raised outside
	// the parser (a Python exception in the engine's own code exits 1).
	status int
}

func (e *Error) Error() string { return e.Message }

// Occurrence is one flag on a command line.
type Occurrence struct {
	Flag *Flag
	// Given is the spelling used (an alias, an abbreviation, --x_y).
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
// are not part of the contract.
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
		if err.status != 0 {
			err.Status = err.status
		}
		if !strings.HasSuffix(err.Stderr, "\n") {
			err.Stderr += "\n"
		}
		return nil, err
	}
	return p, nil
}
