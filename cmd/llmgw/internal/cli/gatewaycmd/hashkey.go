package gatewaycmd

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llmgw/llmgw/gateway"
)

// newSecretPrefix begins the secrets hash-key --new makes.
const newSecretPrefix = "sk-llmgw-"

// hashKeyCommand is `llmgw gateway hash-key`: the stored form of a key.
func hashKeyCommand() *cobra.Command {
	var generate bool
	var name string
	cmd := &cobra.Command{
		Use:   "hash-key [--new] [--name NAME]",
		Short: "Print the hash a key file stores for an API key (the secret is read from stdin)",
		Long: `Print the stored form of an API key, "sha256:" and the SHA-256 of the
secret in hex, as a key file's hash attribute takes it. The secret is the
first line of standard input (so it stays out of the shell's history and the
process list). With --new, a random secret is made (32 bytes from the
system's random source, prefixed sk-llmgw-) and printed to stderr once; only
its hash is kept. With --name, a whole key block is printed.

  printf '%s' "$SECRET" | llmgw gateway hash-key
  llmgw gateway hash-key --new --name team-a >> keys.hcl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var secret string
			if generate {
				b := make([]byte, 32)
				if _, err := rand.Read(b); err != nil {
					return err
				}
				secret = newSecretPrefix + base64.RawURLEncoding.EncodeToString(b)
				fmt.Fprintf(cmd.ErrOrStderr(), "secret (give it to the client; it is not stored): %s\n", secret)
			} else {
				line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if err != nil && line == "" {
					return errors.New("hash-key: no secret on stdin (or use --new)")
				}
				secret = strings.TrimRight(line, "\r\n")
				if secret == "" {
					return errors.New("hash-key: the secret is empty")
				}
			}
			h := gateway.HashKey(secret)
			if name == "" {
				fmt.Fprintln(cmd.OutOrStdout(), h)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "key %q {\n  hash = %q\n}\n", name, h)
			return nil
		},
	}
	cmd.Flags().BoolVar(&generate, "new", false, "make a random secret (printed to stderr) and hash it")
	cmd.Flags().StringVar(&name, "name", "", "print a key block with this name, not the hash alone")
	return cmd
}
