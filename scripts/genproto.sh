#!/usr/bin/env bash
# Regenerates the Go code for internal/nomadplugin/pb from its .proto files.
# Usage: scripts/genproto.sh [OUT_DIR]   (default: in place)
# With OUT_DIR the code is written there instead, which `make check` uses to
# tell whether the committed code is stale.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/internal/nomadplugin/pb"
out=${1:-$src}
if ! command -v protoc >/dev/null; then
  echo "genproto: protoc not found; install it (Debian: apt-get install protobuf-compiler)" >&2
  exit 1
fi
bin="$root/.cache/bin"
mkdir -p "$bin" "$out"
(cd "$root" && go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go \
  && go build -o "$bin/protoc-gen-go-grpc" google.golang.org/grpc/cmd/protoc-gen-go-grpc)
cd "$src"
protoc -I . \
  --plugin=protoc-gen-go="$bin/protoc-gen-go" --plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
  --go_out="$out" --go_opt=paths=source_relative \
  --go-grpc_out="$out" --go-grpc_opt=paths=source_relative \
  */*.proto
