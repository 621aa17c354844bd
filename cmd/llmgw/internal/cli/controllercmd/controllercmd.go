// Package controllercmd is `llmgw controller`: it loads llmgw.hcl, starts
// the controller and its HTTP API, reloads the catalog and facility on
// SIGHUP, and stops on SIGINT/SIGTERM.
package controllercmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/llmgw/llmgw/controller"
	"github.com/llmgw/llmgw/controller/config"
)

// NewCommand returns the controller subcommand.
func NewCommand() *cobra.Command {
	var path, logLevel string
	cmd := &cobra.Command{
		Use:   "controller --config llmgw.hcl",
		Short: "Run the controller: catalog to Nomad jobs, placed under the facility's budgets and holds",
		Long: `Run the llmgw controller. It adopts the jobs it finds in Nomad, then keeps the
catalog running: it places missing replicas, rolls changed profiles, moves
replicas out of drained domains and places failed ones again. Its HTTP API
(listen in llmgw.hcl) serves llmgw ctl and /metrics. SIGHUP reloads the catalog
and facility files; a bad file is refused and the old one stays in force.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), path, logLevel)
		},
	}
	cmd.Flags().StringVar(&path, "config", "llmgw.hcl", "controller configuration file")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}

func run(ctx context.Context, path, level string) error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	cfg, err := config.Load(path, os.Getenv)
	if err != nil {
		return err
	}
	c, err := controller.New(controller.Options{Config: cfg, Logger: log, Identity: identity(os.Getenv), PowerInterval: cfg.PowerInterval})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	if cfg.InsecureWrites {
		// Parse refused a listen address that is not loopback; this is the
		// address actually bound (a name such as localhost resolved).
		if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
			_ = ln.Close()
			return fmt.Errorf("insecure_writes: the API listens on %s, which is not a loopback address: not starting (set api_token instead)", ln.Addr())
		}
	}
	srv := controller.NewServer(c.Handler())
	log.Info("llmgw controller", "api", "http://"+ln.Addr().String(), "nomad", cfg.Nomad.Address, "catalog", cfg.Catalog)

	// Every part runs until ctx ends or the controller's Run returns; the
	// first error (the listener's, the controller's) ends them all and is
	// what run returns.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	grp, ctx := errgroup.WithContext(ctx)
	grp.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	grp.Go(func() error {
		<-ctx.Done()
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
		return nil
	})
	grp.Go(func() error {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				if err := c.Reload(); err != nil {
					log.Error("reload refused; the previous catalog and facility stay in force", "error", err)
				} else {
					log.Info("reloaded catalog and facility")
				}
			}
		}
	})
	grp.Go(func() error {
		defer cancel()
		return c.Run(ctx)
	})
	return grp.Wait()
}

// identity names this controller in the leader lock (and in the holds it
// sets): host:pid, and in a Nomad task its allocation too (NOMAD_ALLOC_ID),
// so that `nomad var get llmgw/leader` says which allocation leads.
func identity(getenv func(string) string) string {
	host, _ := os.Hostname()
	id := fmt.Sprintf("%s:%d", host, os.Getpid())
	if alloc := getenv("NOMAD_ALLOC_ID"); alloc != "" {
		id += " alloc " + alloc
	}
	return id
}
