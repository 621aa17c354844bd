// Command llmgw is the llmgw controller, its operator CLI and the offline
// planner. See `llmgw --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/llmgw/llmgw/cmd/llmgw/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
