#!/usr/bin/env bash
# Regenerates the Go code for nomadplugin/pb from its .proto files.
# Usage: scripts/genproto.sh [OUT_DIR]   (default: in place)
# With OUT_DIR the code is written there instead, which `make check` uses to
# tell whether the committed code is stale.
#
# No protoc is needed: tools/genproto compiles the .proto files with
# protocompile (pure Go) and runs protoc-gen-go and protoc-gen-go-grpc, at
# the versions go.mod pins, as protoc would.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/nomadplugin/pb"
out=${1:-$src}
bin="$root/.cache/bin"
mkdir -p "$bin" "$out"
out=$(cd "$out" && pwd)
(cd "$root" && go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go \
  && go build -o "$bin/protoc-gen-go-grpc" google.golang.org/grpc/cmd/protoc-gen-go-grpc)
(cd "$root/tools" && go build -o "$bin/genproto" ./genproto)
cd "$src"
"$bin/genproto" -I . -out "$out" \
  -plugin go="$bin/protoc-gen-go:paths=source_relative" \
  -plugin go-grpc="$bin/protoc-gen-go-grpc:paths=source_relative" \
  */*.proto
