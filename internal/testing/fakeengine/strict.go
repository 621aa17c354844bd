package fakeengine

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/llmgw/llmgw/engine/contract"
)

// Environment variables of strict mode.
const (
	// StrictEnv turns strict mode on: FAKE_ENGINE_STRICT=vllm@v0.28.0 (or
	// just the engine). A leading --strict argument wins over it.
	StrictEnv = "FAKE_ENGINE_STRICT"
	// FlagsEnv holds fake-engine's own flags (--load-seconds 2
	// --expect-gpus 1 ...), separated by white space. They are read in
	// either mode, after the command line; in strict mode it is the only
	// place for them, since the engine's parser would refuse them.
	FlagsEnv = "FAKE_ENGINE_FLAGS"
)

// strictMode takes strict mode's spec off the front of args (--strict SPEC
// or --strict=SPEC), else from StrictEnv; "" when strict mode is off.
func strictMode(args []string, getenv func(string) string) (spec string, rest []string, err error) {
	if len(args) > 0 {
		if v, ok := strings.CutPrefix(args[0], "--strict="); ok {
			return v, args[1:], nil
		}
		if args[0] == "--strict" {
			if len(args) < 2 || args[1] == "" {
				return "", nil, fmt.Errorf("%w: --strict needs ENGINE or ENGINE@VERSION (one of %s)", ErrUsage, strings.Join(contractSpecs(), ", "))
			}
			return args[1], args[2:], nil
		}
	}
	return getenv(StrictEnv), args, nil
}

func contractSpecs() []string {
	all, _ := contract.All()
	out := make([]string, 0, len(all))
	for _, c := range all {
		out = append(out, c.Spec())
	}
	return out
}

// strictArgs walks args with the engine's contract. When the engine's parser
// would refuse them it returns the *contract.Error, whose Stderr and Status
// are what the engine would print and exit with. Otherwise it returns the
// command line as the engine understood it, spelled for Parse: positionals
// first, then each flag by its main name and its values (attached,
// --flag=value, where a value could read as a flag), without the repeats the
// engine drops (a "last" flag keeps its last occurrence only).
func strictArgs(c *contract.Contract, args []string) ([]string, error) {
	p, err := c.Walk(args)
	if err != nil {
		return nil, err
	}
	last := map[*contract.Flag]int{}
	for i, o := range p.Flags {
		last[o.Flag] = i
	}
	out := append([]string{}, p.Positionals...)
	for i, o := range p.Flags {
		if o.Flag.Repeat != contract.RepeatAppend && last[o.Flag] != i {
			continue
		}
		switch {
		case len(o.Values) == 0:
			out = append(out, o.Flag.Name)
		case len(o.Values) == 1 && !strings.HasPrefix(o.Values[0], "-"):
			// Spelled as given, so that the warning for flags fake-engine
			// ignores shows them as the engine got them.
			out = append(out, o.Flag.Name, o.Values[0])
		case o.Flag.Arity.Max() == 2:
			// Two values make one argument (llama.cpp's --lora-scaled FILE
			// SCALE), which fake-engine only lists as ignored.
			out = append(out, o.Flag.Name+"="+strings.Join(o.Values, " "))
		default:
			for _, v := range o.Values {
				out = append(out, o.Flag.Name+"="+v)
			}
		}
	}
	return out, nil
}

// parseStrict is Run's reading of its command line: strict mode's contract
// (nil when off), and the configuration. A command line the engine would
// refuse comes back as a *contract.Error.
func parseStrict(args []string, getenv func(string) string) (*contract.Contract, Config, error) {
	spec, args, err := strictMode(args, getenv)
	if err != nil {
		return nil, Config{}, err
	}
	own := strings.Fields(getenv(FlagsEnv))
	if spec == "" {
		cfg, err := Parse(slices.Concat(args, own), getenv)
		return nil, cfg, err
	}
	c, err := contract.Lookup(spec)
	if err != nil {
		return nil, Config{}, fmt.Errorf("%w: strict mode %q: %w (have %s)", ErrUsage, spec, err, strings.Join(contractSpecs(), ", "))
	}
	engineArgs, err := strictArgs(c, args)
	if err != nil {
		return c, Config{}, err
	}
	// The engine is the contract's: its /metrics names follow (a later
	// --engine in FlagsEnv still wins).
	cfg, err := Parse(slices.Concat([]string{"--engine", c.Engine}, engineArgs, own), getenv)
	return c, cfg, err
}

// asContractError reports whether err is the engine's parser refusing.
func asContractError(err error) (*contract.Error, bool) {
	var e *contract.Error
	ok := errors.As(err, &e)
	return e, ok
}
