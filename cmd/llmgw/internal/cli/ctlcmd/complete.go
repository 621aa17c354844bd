package ctlcmd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// completionTimeout bounds each API call made to complete a word: a shell
// waiting on a slow or absent controller is worse than no completion.
const completionTimeout = 2 * time.Second

// lister fetches the names a word may complete to.
type lister func(context.Context, *client) ([]string, error)

// complete completes a flag's value from the API.
func (c *ctl) complete(list lister) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return c.names(cmd, list, prefix), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeFirst completes a command's first argument from the API, and
// nothing after it.
func (c *ctl) completeFirst(list lister) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return c.names(cmd, list, prefix), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeLabelArgs completes label's node, then LABEL= for each label.
func (c *ctl) completeLabelArgs(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return c.names(cmd, nodeNames, prefix), cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, l := range labelNames {
		if strings.HasPrefix(l+"=", prefix) {
			out = append(out, l+"=")
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

func (c *ctl) names(cmd *cobra.Command, list lister, prefix string) []cobra.Completion {
	cl, err := c.client()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
	defer cancel()
	names, err := list(ctx, cl)
	if err != nil {
		cobra.CompDebugln(fmt.Sprintf("llmgw ctl: completion: %v", err), true)
		return nil
	}
	var out []cobra.Completion
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

func completionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Print the shell completion script of llmgw",
		Long: `Print the completion script of llmgw for a shell. Replica, node, model and
domain names complete from the controller's API (at --addr or $LLMGW_ADDR).

  bash:  source <(llmgw ctl completion bash)
         (or save it to /etc/bash_completion.d/llmgw; needs bash-completion)
  zsh:   llmgw ctl completion zsh > "${fpath[1]}/_llmgw"
  fish:  llmgw ctl completion fish > ~/.config/fish/completions/llmgw.fish`,
		Args:      args(cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs)),
		ValidArgs: []cobra.Completion{"bash", "zsh", "fish", "powershell"},
		RunE: func(cmd *cobra.Command, a []string) error {
			root, out := cmd.Root(), cmd.OutOrStdout()
			var err error
			switch a[0] {
			case "bash":
				err = root.GenBashCompletionV2(out, true)
			case "zsh":
				err = root.GenZshCompletion(out)
			case "fish":
				err = root.GenFishCompletion(out, true)
			case "powershell":
				err = root.GenPowerShellCompletionWithDesc(out)
			}
			if err != nil {
				return &Error{Code: ExitError, Msg: "write completion: " + err.Error()}
			}
			return nil
		},
	}
}
