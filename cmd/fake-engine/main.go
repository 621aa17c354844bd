// Command fake-engine is an OpenAI-compatible stand-in for inference engines,
// for tests and demos. See docs/fake-engine.md and `fake-engine --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/llmgw/llmgw/internal/testing/fakeengine"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	os.Exit(fakeengine.Run(context.Background(), fakeengine.Options{
		Args:      os.Args[1:],
		LookupEnv: os.LookupEnv,
		Stdout:    os.Stdout,
		Stderr:    os.Stderr,
		Signals:   sigs,
	}))
}
