package engine

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/llmgw/llmgw/engine/contract"
)

// isFlagToken reports whether an argument is spelled as a flag: a dash
// followed by something that does not start a number.
func isFlagToken(a string) bool {
	if len(a) < 2 || a[0] != '-' {
		return false
	}
	c := a[1]
	return c != '.' && (c < '0' || c > '9')
}

// canon returns the descriptor's spelling of a flag token: the part before
// '=', underscores read as dashes where the engine does so, aliases
// resolved.
func (d *Descriptor) canon(tok string) string {
	name, _, _ := strings.Cut(tok, "=")
	if d.underscores && strings.HasPrefix(name, "--") && strings.IndexByte(name, '_') >= 0 {
		name = "--" + strings.ReplaceAll(name[2:], "_", "-")
	}
	if c, ok := d.aliases[name]; ok {
		return c
	}
	return name
}

// flagSet is the set of flags (descriptor spelling) among args.
func (d *Descriptor) flagSet(args []string) map[string]bool {
	set := map[string]bool{}
	for _, a := range args {
		if isFlagToken(a) {
			set[d.canon(a)] = true
		}
	}
	return set
}

// Sets reports whether args give flag, in any of the engine's spellings
// of it (an alias, '_' for '-', --flag=value).
func (d *Descriptor) Sets(args []string, flag string) bool {
	return d.flagSet(args)[d.canon(flag)]
}

// Owned returns the flags llmgw sets itself for the engine, in the
// descriptor's spelling: the model, address and parallelism flags, the
// multi-node flags, and the served-name flag when servedName. A task's or
// a profile's args may not give them (CheckArgs). The slice is shared:
// callers must not change it.
func (d *Descriptor) Owned(servedName bool) []string {
	if servedName {
		return d.ownedServed
	}
	return d.owned
}

// ownedFlags computes what Owned returns, once, when d is registered.
func (d *Descriptor) ownedFlags(servedName bool) []string {
	var out []string
	add := func(fs ...string) {
		for _, f := range fs {
			if f != "" && !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	add(d.Model.Flag, d.HostFlag, d.PortFlag)
	add(d.Parallel.Tensor, d.Parallel.Pipeline, d.Parallel.Data, d.Parallel.Expert)
	if servedName {
		add(d.ServedNameFlag)
	}
	if d.MultiNode != nil {
		add(d.MultiNode.Flags...)
	}
	add(d.owns...)
	return out
}

// ownedFlag returns the owned flag a token sets, if any: the flag itself,
// an alias of it, or (for an engine that takes unambiguous prefixes) a
// prefix of one of their long spellings, which the engine would take for
// it or reject as ambiguous.
func (d *Descriptor) ownedFlag(tok string, servedName bool) (string, bool) {
	f := d.canon(tok)
	if slices.Contains(d.Owned(servedName), f) {
		return f, true
	}
	if !d.abbrev || !strings.HasPrefix(f, "--") || len(f) < 3 {
		return "", false
	}
	for _, sp := range d.ownedLong {
		if (servedName || sp.flag != d.ServedNameFlag) && strings.HasPrefix(sp.spelling, f) {
			return sp.flag, true
		}
	}
	return "", false
}

// spelling is one long spelling of an owned flag.
type spelling struct{ spelling, flag string }

// ownedSpellings lists the long spellings of every owned flag (its own and
// its aliases'), once, when d is registered.
func (d *Descriptor) ownedSpellings() []spelling {
	var out []spelling
	for _, f := range d.ownedFlags(true) {
		if strings.HasPrefix(f, "--") {
			out = append(out, spelling{f, f})
		}
	}
	for alias, f := range d.aliases {
		if strings.HasPrefix(alias, "--") && slices.Contains(d.ownedFlags(true), f) {
			out = append(out, spelling{alias, f})
		}
	}
	slices.SortFunc(out, func(a, b spelling) int { return strings.Compare(a.spelling, b.spelling) })
	return out
}

// CheckArgs reports an argument of a task's (or a catalog profile's) args
// that would fight llmgw or that the engine would reject for a reason
// llmgw can see: a flag llmgw sets itself (Owned: llmgw derives them from
// the model, the address and the layout, so args may not change them;
// servedName says whether the served-name flag is llmgw's), and, for an
// engine whose parser rejects a repeated flag, a flag given twice. Errors
// name args[i].
func (d *Descriptor) CheckArgs(args []string, servedName bool) error {
	var seen map[string]int // for an engine that rejects repeats
	if d.noRepeats {
		seen = map[string]int{}
	}
	for i, a := range args {
		if !isFlagToken(a) {
			continue
		}
		if f, ok := d.ownedFlag(a, servedName); ok {
			return fmt.Errorf("args[%d]: %s is set by llmgw%s", i, a, d.ownedHint(f))
		}
		if seen == nil {
			continue
		}
		f := d.canon(a)
		if j, dup := seen[f]; dup && !slices.Contains(d.repeatable, f) {
			return fmt.Errorf("args[%d]: %s repeats args[%d] (%s): engine %q%s rejects a flag given twice", i, a, j, args[j], d.Name, d.pinnedAt())
		}
		seen[f] = i
	}
	return nil
}

// ownedHint says where llmgw takes an owned flag's value from.
func (d *Descriptor) ownedHint(f string) string {
	switch f {
	case d.Parallel.Tensor:
		return " from tensor_parallel: set that instead"
	case d.Parallel.Pipeline:
		return " from pipeline_parallel: set that instead"
	case d.Parallel.Data:
		return " from data_parallel: set that instead"
	case d.Parallel.Expert:
		return " from expert_parallel: set that instead"
	case d.HostFlag, d.PortFlag:
		return " to the task's port"
	case d.Model.Flag:
		return " from the model (the task's model, the catalog's source)"
	case d.ServedNameFlag:
		return " to the model's name (the task's served_model_name, the catalog's model name)"
	}
	if d.MultiNode != nil && slices.Contains(d.MultiNode.Flags, f) {
		return " from the replica's nodes and rank"
	}
	if d.ownsWhy != nil {
		if why, ok := d.ownsWhy[f]; ok {
			return ": " + why
		}
	}
	return ""
}

// CheckContract reports an argument of args that the engine's own parser,
// at the version llmgw pins (engine/contract), would reject: a flag that
// version does not know, a value missing, a flag repeated where its parser
// forbids it. It builds the command line llmgw would run for in (with args
// as in.Args) and walks it as the engine's parser would; the error names
// args[i] and quotes the parser's message. An engine with no contract
// (command) passes.
func CheckContract(in Input) error { return CheckContractAt(in, "") }

// ContractVersions lists the versions of engine that llmgw has a contract
// for, as ENGINE@VERSION; none for an engine without one (command).
func ContractVersions(engine string) []string {
	d, ok := registry[engine]
	if !ok || d.Pinned.Version == "" {
		return nil
	}
	c, err := contract.Lookup(d.Name)
	if err != nil {
		return nil
	}
	return []string{c.Spec()}
}

// HasContract reports whether llmgw has engine's contract at version ("":
// the pinned version). A leading "v" does not matter: 0.28.0 is v0.28.0.
func HasContract(engine, version string) bool {
	d, ok := registry[engine]
	if !ok || d.Pinned.Version == "" {
		return false
	}
	_, err := contract.Lookup(d.Name + "@" + cmp.Or(version, d.Pinned.Version))
	return err == nil
}

// CheckContractAt is CheckContract against the contract of the engine's
// release version ("": the pinned one). Where llmgw has no contract for
// that version (HasContract is false) the args are not walked and it
// returns nil: the caller warns that they went unchecked. CheckArgs, which
// needs no contract, still applies.
func CheckContractAt(in Input, version string) error {
	d, ok := registry[in.Engine]
	if !ok {
		return fmt.Errorf("engine: %w", Unknown(in.Engine))
	}
	if d.Pinned.Version == "" {
		return nil
	}
	c, err := contract.Lookup(d.Name + "@" + cmp.Or(version, d.Pinned.Version))
	if errors.Is(err, contract.ErrNoContract) && version != "" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("engine %q: %w", d.Name, err)
	}
	cmd, err := Build(in)
	if err != nil {
		return err
	}
	err = c.Check(cmd.Args)
	var ce *contract.Error
	if err == nil || !errors.As(err, &ce) {
		return err
	}
	msg := ce.Message
	if ce.Hint != "" {
		msg += "; " + ce.Hint
	}
	// Name the argument of args at fault: the last occurrence of the token
	// the parser stopped at (a repeat is the second one).
	for i := len(in.Args) - 1; i >= 0; i-- {
		a := in.Args[i]
		if a == ce.Arg || strings.HasPrefix(a, ce.Arg+"=") || (ce.Arg != "" && strings.HasPrefix(ce.Arg, a+"=")) {
			return fmt.Errorf("args[%d]: %s: engine %q%s would refuse it: %s", i, a, d.Name, d.pinnedAt(), msg)
		}
	}
	return fmt.Errorf("args: engine %q%s would refuse the command line: %s", d.Name, d.pinnedAt(), msg)
}
