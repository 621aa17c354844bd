// Package cli builds the llmgw command tree. Each subcommand lives in its
// own package and is added in NewRootCommand; main only calls Execute.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llmgw/llmgw/cmd/llmgw/internal/cli/controllercmd"
	"github.com/llmgw/llmgw/cmd/llmgw/internal/cli/ctlcmd"
	"github.com/llmgw/llmgw/cmd/llmgw/internal/cli/gatewaycmd"
	"github.com/llmgw/llmgw/cmd/llmgw/internal/cli/plancmd"
	"github.com/llmgw/llmgw/internal/version"
)

// NewRootCommand returns the llmgw command with every subcommand.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "llmgw",
		Short: "Run LLM inference engines on a Nomad cluster, placed with power and location in mind",
		// Errors are printed once, by Execute; usage only on request.
		SilenceUsage:  true,
		SilenceErrors: true,
		// llmgw --version: the build's version (internal/version).
		Version: version.Version,
	}
	root.SetVersionTemplate("llmgw {{.Version}}\n")
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(plancmd.NewCommand(), controllercmd.NewCommand(), gatewaycmd.NewCommand(), ctlcmd.NewCommand())
	return root
}

// exitCoder is an error that asks for a particular exit status.
type exitCoder interface {
	error
	ExitCode() int
}

// Execute runs llmgw with args and returns the process exit status: 0 on
// success, what the command asks for through an error with an ExitCode
// method, 1 on any other error. Errors go to stderr, one "llmgw: " line each.
func Execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := NewRootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	code := 1
	var ec exitCoder
	if errors.As(err, &ec) {
		code = ec.ExitCode()
	}
	if msg := err.Error(); msg != "" {
		for line := range strings.SplitSeq(msg, "\n") {
			fmt.Fprintf(stderr, "llmgw: %s\n", line)
		}
	}
	return code
}
