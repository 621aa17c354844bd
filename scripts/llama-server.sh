#!/usr/bin/env bash
# make llama-server: build llama.cpp's own llama-server at the pinned version,
# the real engine that the llama.cpp tests run against.
#
# No registry serves a llama-server binary, but the npm package
# node-llama-cpp ships llama.cpp's source as a git bundle (one squashed
# commit). This script fetches that package at a pinned version, checks the
# tarball's sha256, clones the bundle and builds only the llama-server target
# with cmake, CPU only. Nothing of llama.cpp enters the repository: the source
# and the build are cached by commit outside it, in
#   ${LLMGW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmgw}/llama.cpp/<commit>/
# and a second run with a built binary there does nothing.
#
# Prints the binary's path as its last line of standard output. The tests find
# the same folder on their own (internal/realengine); LLAMA_SERVER=/path
# overrides it there.
#
# Needs: npm (Node.js), cmake >= 3.14, a C and C++ compiler, git, sha256sum.
# About 13 minutes on 2 cores.
set -euo pipefail

NPM_PACKAGE=node-llama-cpp
NPM_VERSION=3.21.1
NPM_SHA256=7a231d6bafa14142a1cbed9893d4ec5bc6041b2a5f5939a623accaab4203c11f
COMMIT=80fb11a
LLAMA_VERSION=0.4.0

# RECIPE names how this script builds; a binary built by an earlier recipe
# (bin/recipe differs) is built again. 2: without AMX (below).
RECIPE=2

cache_root=${LLMGW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmgw}
dir=$cache_root/llama.cpp/$COMMIT
bin=$dir/bin/llama-server

say() { echo "llama-server.sh: $*" >&2; }
die() { say "$*"; exit 1; }

if [ -x "$bin" ] && "$bin" --version 2>&1 | grep -q "commit $COMMIT" &&
  [ "$(cat "$dir/bin/recipe" 2>/dev/null)" = "$RECIPE" ]; then
  say "already built: llama.cpp $LLAMA_VERSION ($COMMIT)"
  echo "$bin"
  exit 0
fi

missing=()
for tool in npm cmake git sha256sum tar; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
command -v "${CC:-cc}" >/dev/null 2>&1 || missing+=("a C compiler (${CC:-cc})")
command -v "${CXX:-c++}" >/dev/null 2>&1 || missing+=("a C++ compiler (${CXX:-c++})")
if [ ${#missing[@]} -gt 0 ]; then
  die "missing: ${missing[*]} (on Debian: apt-get install cmake g++ nodejs npm git)"
fi

mkdir -p "$dir"
work=$(mktemp -d "$dir/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT

say "fetching $NPM_PACKAGE@$NPM_VERSION (llama.cpp $LLAMA_VERSION, commit $COMMIT)"
(cd "$work" && npm pack --silent --ignore-scripts "$NPM_PACKAGE@$NPM_VERSION" >/dev/null) ||
  die "npm pack $NPM_PACKAGE@$NPM_VERSION failed"
tgz=$work/$NPM_PACKAGE-$NPM_VERSION.tgz
[ -f "$tgz" ] || die "npm pack did not write $tgz"
got=$(sha256sum "$tgz" | cut -d' ' -f1)
[ "$got" = "$NPM_SHA256" ] || die "$tgz: sha256 $got, want $NPM_SHA256"

tar -xzf "$tgz" -C "$work" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
grep -q "\"v$LLAMA_VERSION\"" "$work/package/llama/llama.cpp.info.json" ||
  die "package/llama/llama.cpp.info.json does not name v$LLAMA_VERSION: $(cat "$work/package/llama/llama.cpp.info.json")"

src=$work/src
git -c advice.detachedHead=false clone --quiet "$work/package/llama/gitRelease.bundle" "$src"
head=$(git -C "$src" rev-parse --short=7 HEAD)
[ "$head" = "$COMMIT" ] || die "the bundle's commit is $head, want $COMMIT"

# GGML_NATIVE (the default) compiles for this CPU. Where that CPU has AMX
# (Intel Sapphire Rapids and later) ggml's AMX matrix kernels come with it,
# and on such a machine here (a Firecracker guest, 2026-12-02) llama-server
# died of SIGSEGV in ggml_backend_amx_mul_mat while warming up, before it
# served anything. The tests need an engine that runs, not the fastest one:
# switch AMX off where the compiler knows the flags (an explicit -mno-*
# wins over -march=native whatever their order); AVX-512 and the rest stay.
noamx=()
if [ "$(uname -m)" = x86_64 ] &&
  echo 'int main(void){return 0;}' | "${CC:-cc}" -mno-amx-tile -mno-amx-int8 -mno-amx-bf16 -x c - -o /dev/null 2>/dev/null; then
  noamx=(-DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
fi

say "configuring (cmake $(cmake --version | head -1 | awk '{print $3}'))"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release "${noamx[@]}" \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF >"$work/configure.log" 2>&1 ||
  { tail -30 "$work/configure.log" >&2; die "cmake configure failed (log above)"; }

jobs=${LLAMA_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}
say "building llama-server with $jobs jobs (about 13 minutes on 2 cores)"
cmake --build "$work/build" --target llama-server -j "$jobs" >"$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log" >&2; die "the build failed (log above)"; }

built=$(find "$work/build" -type f -name llama-server -perm -u+x | head -1)
[ -n "$built" ] || die "the build wrote no llama-server binary"
"$built" --version 2>&1 | grep -q "commit $COMMIT" ||
  die "$built --version does not name commit $COMMIT: $("$built" --version 2>&1 | tail -2)"

# Keep the source tree: the tiny-model writer reads its tokenizer vocabularies
# (models/ggml-vocab-*.gguf), and tests cite its files. Swap folders in last,
# so an interrupted run leaves no half-built cache behind.
rm -rf "$dir/src" "$dir/bin"
mv "$src" "$dir/src"
mkdir -p "$dir/bin.new" && cp "$built" "$dir/bin.new/llama-server" &&
  echo "$RECIPE" >"$dir/bin.new/recipe" && mv "$dir/bin.new" "$dir/bin"
say "built: $("$bin" --version 2>&1 | grep version)"
echo "$bin"
