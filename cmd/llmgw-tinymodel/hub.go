package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/llmgw/llmgw/internal/testing/hubserver"
)

// fileFlags is the repeated -file path-in-repo=file-on-disk.
type fileFlags map[string]string

func (f fileFlags) String() string { return fmt.Sprint(map[string]string(f)) }

func (f fileFlags) Set(v string) error {
	name, disk, ok := strings.Cut(v, "=")
	if !ok || name == "" || disk == "" {
		return fmt.Errorf("%q: want path-in-repo=file-on-disk", v)
	}
	if _, dup := f[name]; dup {
		return fmt.Errorf("%q: %s named twice", v, name)
	}
	f[name] = disk
	return nil
}

// runHub serves the -file files as -repo at -revision until ctx ends.
func runHub(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("llmgw-tinymodel hub", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "the address to serve on (host:port; port 0 picks a free one)")
	addrFile := fs.String("addr-file", "", "a file to write the hub's endpoint (http://host:port) to once it serves")
	repo := fs.String("repo", "", "the repository id, org/name (required)")
	revision := fs.String("revision", "main", "the revision the files are at")
	token := fs.String("token", "", "gate the repository: its files need Authorization: Bearer <token>")
	redirect := fs.Bool("redirect", false, "answer resolve with a 302 to a blob URL, as the hub does for LFS files")
	files := fileFlags{}
	fs.Var(files, "file", "path-in-repo=file-on-disk, repeated")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("hub: unexpected arguments %q", fs.Args())
	}
	if *repo == "" {
		return errors.New("hub: -repo: name the repository (org/name)")
	}
	if len(files) == 0 {
		return errors.New("hub: -file: name at least one file (path-in-repo=file-on-disk)")
	}
	if org, name, ok := strings.Cut(*repo, "/"); !ok || org == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("hub: -repo %q: want org/name", *repo)
	}

	s := hubserver.New(hubserver.Options{Redirect: *redirect})
	commit, err := s.AddFiles(*repo, *revision, files)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if *token != "" {
		s.Gate(*repo, *token)
	}
	if err := s.Listen(*listen); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	defer s.Close()
	if *addrFile != "" {
		if err := writeAtomic(*addrFile, s.URL()+"\n"); err != nil {
			return fmt.Errorf("hub: -addr-file: %w", err)
		}
	}
	fmt.Fprintf(stdout, "hub: serving %s at %s (commit %s), %d files, on %s\n", *repo, *revision, commit, len(files), s.URL())
	<-ctx.Done()
	return nil
}

// writeAtomic writes data to name through a temporary file renamed over
// it, so that a reader polling for name never sees it half written.
func writeAtomic(name, data string) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.WriteString(data); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	// An address, for other processes to read (CreateTemp makes it 0600).
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), name)
}
