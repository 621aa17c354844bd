// Command genproto compiles .proto files with protocompile (a pure-Go
// protobuf compiler) and hands them to protoc plugins (protoc-gen-go,
// protoc-gen-go-grpc) exactly as protoc would: a CodeGeneratorRequest on
// the plugin's stdin, a CodeGeneratorResponse on its stdout. It lets
// `make generate` and `make check` run on machines without protoc.
//
// Usage: genproto -I DIR -out DIR -plugin go=PATH[:OPTS] ... FILE.proto...
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

type plugins []string

func (p *plugins) String() string     { return strings.Join(*p, ",") }
func (p *plugins) Set(v string) error { *p = append(*p, v); return nil }

func main() {
	var (
		include = flag.String("I", ".", "import path: the directory the .proto file names are relative to")
		out     = flag.String("out", ".", "directory the generated files are written under")
		plugs   plugins
	)
	flag.Var(&plugs, "plugin", "NAME=PATH[:PARAMETER], e.g. go=bin/protoc-gen-go:paths=source_relative (repeatable)")
	flag.Parse()
	if err := run(*include, *out, plugs, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "genproto:", err)
		os.Exit(1)
	}
}

func run(include, out string, plugs []string, files []string) error {
	if len(files) == 0 {
		return fmt.Errorf("no .proto files given")
	}
	comp := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{include}}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	compiled, err := comp.Compile(context.Background(), files...)
	if err != nil {
		return err
	}
	// The request lists every file in dependency order, imports first, as
	// protoc does; FileToGenerate names only the ones asked for.
	var (
		all  []*descriptorpb.FileDescriptorProto
		seen = map[string]bool{}
	)
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imps := fd.Imports()
		for i := 0; i < imps.Len(); i++ {
			add(imps.Get(i).FileDescriptor)
		}
		all = append(all, protodesc.ToFileDescriptorProto(fd))
	}
	for _, f := range compiled {
		add(f)
	}
	for _, p := range plugs {
		name, spec, ok := strings.Cut(p, "=")
		if !ok {
			return fmt.Errorf("-plugin %q: want NAME=PATH[:PARAMETER]", p)
		}
		path, param, _ := strings.Cut(spec, ":")
		req := &pluginpb.CodeGeneratorRequest{
			FileToGenerate: files,
			ProtoFile:      all,
			CompilerVersion: &pluginpb.Version{
				Major: proto.Int32(0), Minor: proto.Int32(14), Patch: proto.Int32(1), Suffix: proto.String("protocompile"),
			},
		}
		if param != "" {
			req.Parameter = proto.String(param)
		}
		if err := runPlugin(name, path, req, out); err != nil {
			return err
		}
	}
	return nil
}

func runPlugin(name, path string, req *pluginpb.CodeGeneratorRequest, out string) error {
	in, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(path)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("plugin %s (%s): %w: %s", name, path, err, stderr.String())
	}
	var resp pluginpb.CodeGeneratorResponse
	if err := proto.Unmarshal(stdout.Bytes(), &resp); err != nil {
		return fmt.Errorf("plugin %s: bad response: %w", name, err)
	}
	if resp.Error != nil {
		return fmt.Errorf("plugin %s: %s", name, resp.GetError())
	}
	for _, f := range resp.File {
		if f.GetInsertionPoint() != "" {
			return fmt.Errorf("plugin %s: insertion points are not supported (%s)", name, f.GetName())
		}
		dst := filepath.Join(out, filepath.FromSlash(f.GetName()))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, []byte(f.GetContent()), 0o644); err != nil {
			return err
		}
	}
	return nil
}
