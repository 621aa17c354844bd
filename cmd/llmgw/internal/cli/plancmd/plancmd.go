// Package plancmd is `llmgw plan`: place a catalog on a fleet offline, with
// the same engine the controller uses, and show where every replica would
// go, the budgeted domains' draw, and why any replica cannot be placed.
package plancmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/llmgw/llmgw/facility"
	"github.com/llmgw/llmgw/internal/bounded"
)

// Exit statuses of `llmgw plan`.
const (
	ExitPlaced   = 0 // every replica placed
	ExitBadInput = 1 // an input could not be read or is wrong
	ExitUnplaced = 2 // some replica could not be placed
)

// Options are the plan command's flags.
type Options struct {
	Fleet    string
	Facility string
	Catalog  string
	// Output is "table" (the default when empty) or "json".
	Output string
}

// exitError carries an exit status to cli.Execute.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
func (e *exitError) ExitCode() int { return e.code }

// NewCommand returns the plan command.
func NewCommand() *cobra.Command {
	var (
		o      Options
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "plan --fleet FILE --facility FILE --catalog FILE [-o table|json]",
		Short: "Place a catalog on a fleet offline and show where every replica would go",
		Long: `Place every replica of a catalog on a fleet under a facility's power budgets
and holds, with no cluster, using the placement engine of the controller.

Prints the placements, the budgeted domains' draw after them, and the replicas
that cannot be placed with every reason: as tables, or with -o json as one line
of JSON (--json, deprecated, is -o json). Exit status: 0 when every replica is
placed, 2 when some replica is not, 1 on bad input.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				_, _ = fmt.Fprintln(cmd.ErrOrStderr(), "llmgw plan: --json is deprecated: use -o json")
				if cmd.Flags().Changed("output") && o.Output != "json" {
					return &exitError{ExitBadInput, fmt.Errorf("--json and -o %s disagree: give -o only", o.Output)}
				}
				o.Output = "json"
			}
			collectLessOften()
			return Run(o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Fleet, "fleet", "", "fleet file: the nodes (HCL; HCL's JSON syntax when the name ends in .json)")
	f.StringVar(&o.Facility, "facility", "", "facility file: budgets and holds (HCL, or JSON as --fleet)")
	f.StringVar(&o.Catalog, "catalog", "", "catalog file: models and profiles (HCL, or JSON as --fleet)")
	f.StringVarP(&o.Output, "output", "o", "table", "output format: table or json")
	// Not cobra's MarkDeprecated: its notice goes to the command's output,
	// which is stdout, into the JSON a script reads.
	f.BoolVar(&asJSON, "json", false, "deprecated: use -o json")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
	for _, name := range []string{"fleet", "facility", "catalog"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// planGCPercent is the garbage collector's target for `llmgw plan`.
//
// The command is one batch: reading a large fleet allocates close to a
// gigabyte (HCL's parsers keep every token of the file, 3.8 MB of fleet.hcl
// for 12,800 nodes, with its position), nearly all of it garbage once the
// file is decoded, and the process exits when the plan is printed. With
// Go's default of 100 the collector scans the growing token slices again
// and again; at 400 it runs about a quarter as often, for a higher peak of
// memory (docs/perf.md, issue 23: the numbers of both).
const planGCPercent = 400

// collectLessOften sets the garbage collector's target to planGCPercent,
// unless GOGC says otherwise.
func collectLessOften() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(planGCPercent)
	}
}

// Run plans and prints to stdout. Its error has an ExitCode method: 1 for bad
// input, 2 when some replica is not placed.
func Run(o Options, stdout io.Writer) error {
	switch o.Output {
	case "", "table", "json":
	default:
		return &exitError{ExitBadInput, fmt.Errorf("-o %q: want table or json", o.Output)}
	}
	fleet, fac, cat, err := Load(o.Fleet, o.Facility, o.Catalog)
	if err != nil {
		return &exitError{ExitBadInput, err}
	}
	plan, err := facility.PlanCatalog(fleet, fac, cat)
	if err != nil {
		return &exitError{ExitBadInput, err}
	}
	var out []byte
	if o.Output == "json" {
		out, err = RenderJSON(plan)
		if err != nil {
			return err
		}
	} else {
		out = RenderText(plan)
	}
	if _, err := stdout.Write(out); err != nil {
		return fmt.Errorf("write plan: %w", err)
	}
	if n := len(plan.Unplaced); n > 0 {
		return &exitError{ExitUnplaced, fmt.Errorf("%d of %d replicas not placed", n, n+len(plan.Placements))}
	}
	return nil
}

// Load reads and checks the three inputs. Every problem is reported, each
// naming file:line. The three files are read and parsed at once, each on
// its own goroutine, and a fleet in HCL's JSON syntax in parts, one a core
// (facility.FleetReader): the fleet takes most of the time (docs/perf.md).
// partsPerCore is how many parts of a JSON fleet Load reads per core,
// one part a core at a time: small parts keep the heap small (a part's
// syntax tree is garbage once read), which matters as much as the cores
// on a machine where faulting memory in is slow (docs/perf.md: 4.4 MB in
// 64 parts on 2 cores, 0.83-0.86 s for the whole command, against
// 1.19-1.69 s in 2 parts).
const partsPerCore = 32

func Load(fleetFile, facilityFile, catalogFile string) (facility.Fleet, facility.Facility, facility.Catalog, error) {
	var (
		fleet facility.Fleet
		fac   facility.Facility
		cat   facility.Catalog
		errs  [3]error // in the order of the files
		wg    sync.WaitGroup
	)
	parse := func(i int, name string, parse func(string, []byte) error) {
		wg.Go(func() {
			b, err := bounded.ReadFile(name)
			if err == nil {
				err = parse(name, b)
			}
			errs[i] = err
		})
	}
	parse(0, fleetFile, func(name string, b []byte) (err error) {
		// A JSON fleet is read in parts, a core each at a time.
		procs := runtime.GOMAXPROCS(0)
		r := facility.NewFleetReader(name, b, partsPerCore*procs)
		var parts errgroup.Group
		parts.SetLimit(procs)
		for i := range r.Parts() {
			parts.Go(func() error { r.Read(i); return nil })
		}
		_ = parts.Wait()
		fleet, err = r.Fleet()
		return err
	})
	parse(1, facilityFile, func(name string, b []byte) (err error) {
		fac, err = facility.ParseFacility(name, b)
		return err
	})
	parse(2, catalogFile, func(name string, b []byte) (err error) {
		cat, err = facility.ParseCatalog(name, b)
		return err
	})
	wg.Wait()
	err := errors.Join(errs[:]...)
	if err == nil {
		err = errors.Join(facility.CheckFacility(fleet, fac), facility.CheckCatalog(fleet, fac, cat))
	}
	if err != nil {
		return facility.Fleet{}, facility.Facility{}, facility.Catalog{}, err
	}
	return fleet, fac, cat, nil
}
