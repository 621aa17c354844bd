// Package ctlcmd is `llmgw ctl`: the operator CLI of a running controller.
// It reads and changes the controller's HTTP API (docs/controller.md): the
// replicas and why each sits where it does, the nodes with their location,
// GPUs, power and holds, the facility's budgeted and held domains, and the
// catalog; it labels nodes and holds and releases domains.
//
// Every read prints an aligned table, or the API's JSON with -o json.
// Errors carry the API's hint (an unknown name gets the closest ones) and
// an exit status scripts can test: see the Exit constants.
package ctlcmd

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Exit statuses of `llmgw ctl`.
const (
	ExitOK           = 0 // done
	ExitError        = 1 // the controller refused or failed the request, or the output could not be written
	ExitUsage        = 2 // bad command line, or a request the API calls malformed (HTTP 400)
	ExitNotFound     = 3 // no such replica, node, domain or hold (HTTP 404)
	ExitUnauthorized = 4 // missing or wrong API token (HTTP 401, 403)
	ExitUnreachable  = 5 // the controller could not be reached
)

// DefaultAddr is the controller API's address when neither --addr nor
// LLMGW_ADDR says otherwise: the controller's default listen address.
const DefaultAddr = "http://127.0.0.1:9797"

// Environment variables read by `llmgw ctl`.
const (
	EnvAddr  = "LLMGW_ADDR"
	EnvToken = "LLMGW_TOKEN"
)

// Error is a failure with an exit status and, where there is something to
// say, a hint on what to do. cli.Execute prints each line of Error().
type Error struct {
	Code int
	Msg  string
	Hint string
}

func (e *Error) Error() string {
	if e.Hint == "" {
		return e.Msg
	}
	return e.Msg + "\n" + e.Hint
}

// ExitCode is the process exit status for this error.
func (e *Error) ExitCode() int { return e.Code }

func usageErr(format string, args ...any) error {
	return &Error{Code: ExitUsage, Msg: fmt.Sprintf(format, args...)}
}

// Options wire the command; zero fields take the process's own.
type Options struct {
	// Getenv reads LLMGW_ADDR and LLMGW_TOKEN; default os.Getenv.
	Getenv func(string) string
	// Now is the clock for ages; default time.Now.
	Now func() time.Time
	// HTTPClient talks to the controller; default a client with a 30 s
	// timeout.
	HTTPClient *http.Client
}

// ctl is the state shared by the subcommands: options and global flags.
type ctl struct {
	opts   Options
	addr   string
	token  string
	output string
}

// NewCommand returns `llmgw ctl` with every subcommand.
func NewCommand() *cobra.Command { return New(Options{}) }

// New returns `llmgw ctl` wired with opts.
func New(opts Options) *cobra.Command {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	c := &ctl{opts: opts}
	cmd := &cobra.Command{
		Use:   "ctl",
		Short: "Operate a running controller: models and their counts, replicas, nodes, facility holds, labels",
		Long: `Operate a running llmgw controller through its HTTP API.

The controller is at --addr, else $LLMGW_ADDR, else ` + DefaultAddr + `.
Every command sends --token, else $LLMGW_TOKEN, as a bearer token: a
controller with an api_token answers reads as well as writes only with it.

Every read prints a table, or the API's JSON with -o json.

Exit status: 0 done; 1 the controller refused or failed the request;
2 bad command line or malformed request; 3 not found; 4 missing or wrong
API token; 5 controller unreachable.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			hint := "run '" + cmd.CommandPath() + " --help' for the commands"
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				hint = "did you mean " + strings.Join(s, ", ") + "?"
			}
			return &Error{Code: ExitUsage, Msg: msg, Hint: hint}
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &Error{Code: ExitUsage, Msg: err.Error(), Hint: "run '" + cmd.CommandPath() + " --help' for its flags"}
	})
	pf := cmd.PersistentFlags()
	pf.StringVar(&c.addr, "addr", "", "controller API address (default $"+EnvAddr+", else "+DefaultAddr+")")
	pf.StringVar(&c.token, "token", "", "API token sent as a bearer token (default $"+EnvToken+")")
	pf.StringVarP(&c.output, "output", "o", "table", "output format: table or json")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "json"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.AddCommand(
		c.modelsCmd(), c.weightsCmd(), c.replicasCmd(), c.explainCmd(), c.scaleCmd(), c.nodesCmd(), c.labelCmd(), c.facilityCmd(), c.powerCmd(),
		c.reloadCmd(), c.planCmd(), c.cacheCmd(), completionCmd(),
	)
	return cmd
}

// client returns an API client from the flags and environment.
func (c *ctl) client() (*client, error) {
	if c.output != "table" && c.output != "json" {
		return nil, usageErr("-o %q: want table or json", c.output)
	}
	addr := c.addr
	if addr == "" {
		addr = c.opts.Getenv(EnvAddr)
	}
	if addr == "" {
		addr = DefaultAddr
	}
	token := c.token
	if token == "" {
		token = c.opts.Getenv(EnvToken)
	}
	return newClient(addr, token, c.opts.HTTPClient)
}

func (c *ctl) json() bool { return c.output == "json" }

// args returns a cobra argument check whose failures are usage errors.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return &Error{Code: ExitUsage, Msg: err.Error(), Hint: "usage: " + cmd.UseLine()}
		}
		return nil
	}
}

// write writes b to w, as an error with an exit status.
func write(w io.Writer, b []byte) error {
	if _, err := w.Write(b); err != nil {
		return &Error{Code: ExitError, Msg: "write output: " + err.Error()}
	}
	return nil
}

// exitCode returns err's exit status: an Error's code, else ExitError.
func exitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ExitError
}
