#!/usr/bin/env bash
# make dist: release tarballs in dist/, with SHA256SUMS.
#
#   llmgw_<version>_<os>_<arch>.tar.gz
#       llmgw (the controller, the gateway, llmgw ctl and llmgw plan), built
#       without cgo; jobs/ (the gateway's job, client configuration, ACL
#       policies, examples) and README.md. For every platform in PLATFORMS.
#   llmgw-nomad-plugins_<version>_linux_<arch>.tar.gz
#       what goes into a Nomad client's plugin_dir: nomad-device-nvml and
#       nomad-driver-llmgw (cgo, for go-nvml; linked against the build
#       machine's glibc) and llmgw-supervisor (no cgo). Linux only, and only
#       where a C compiler for the platform is found (CC_linux_<arch>, else
#       gcc for this machine's own arch, else <triplet>-gcc); without one the
#       tarball is skipped and the summary says so.
#
# fake-engine, llmgw-demo and llmgw-tinymodel are development tools (make build), in no
# tarball. Every binary carries VERSION (-X …/internal/version.Version).
# Tarballs are reproducible: sorted names, owner 0, gzip without a name or
# time, every file's time the commit's.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${VERSION:?set VERSION (make dist does, from scripts/version.sh)}"
GO=${GO:-go}
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
OUT=${DIST_DIR:-dist}
LDFLAGS="-X github.com/llmgw/llmgw/internal/version.Version=$VERSION"
mtime=$(git log -1 --format=%ct 2>/dev/null || date +%s)
hostarch=$("$GO" env GOHOSTARCH)
hostos=$("$GO" env GOHOSTOS)

rm -rf "$OUT"
mkdir -p "$OUT/.stage"
built=()
skipped=()

triplet() {
	case $1 in
	amd64) echo x86_64-linux-gnu ;;
	arm64) echo aarch64-linux-gnu ;;
	*) echo "$1-linux-gnu" ;;
	esac
}

# cc ARCH prints a C compiler for linux/ARCH, or nothing.
cc() {
	local var="CC_linux_$1"
	if [[ -n ${!var:-} ]]; then
		command -v "${!var}" || true
		return
	fi
	if [[ $hostos == linux && $hostarch == "$1" ]] && command -v gcc >/dev/null; then
		command -v gcc
		return
	fi
	command -v "$(triplet "$1")-gcc" || true
}

pack() { # pack NAME: tar the stage directory NAME into $OUT/NAME.tar.gz
	tar -C "$OUT/.stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" -cf - "$1" |
		gzip -n -9 >"$OUT/$1.tar.gz"
	built+=("$1.tar.gz")
}

for p in $PLATFORMS; do
	os=${p%/*} arch=${p#*/}
	name="llmgw_${VERSION}_${os}_${arch}"
	stage="$OUT/.stage/$name"
	mkdir -p "$stage"
	echo "== $name"
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -ldflags "$LDFLAGS" -o "$stage/" ./cmd/llmgw
	cp README.md "$stage/"
	cp -R jobs "$stage/jobs"
	pack "$name"

	[[ $os == linux ]] || continue
	name="llmgw-nomad-plugins_${VERSION}_${os}_${arch}"
	compiler=$(cc "$arch")
	if [[ -z $compiler ]]; then
		skipped+=("$name.tar.gz: no C compiler for linux/$arch (nomad-device-nvml and nomad-driver-llmgw need cgo for go-nvml); set CC_linux_$arch, e.g. $(triplet "$arch")-gcc")
		echo "   skipped: no C compiler for linux/$arch"
		continue
	fi
	echo "== $name (CC=$compiler)"
	stage="$OUT/.stage/$name"
	mkdir -p "$stage"
	CGO_ENABLED=1 CC=$compiler GOOS=$os GOARCH=$arch "$GO" build -trimpath -ldflags "$LDFLAGS" -o "$stage/" \
		./cmd/nomad-device-nvml ./cmd/nomad-driver-llmgw
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$GO" build -trimpath -ldflags "$LDFLAGS" -o "$stage/" ./cmd/llmgw-supervisor
	cp README.md "$stage/"
	pack "$name"
done

rm -rf "$OUT/.stage"
(cd "$OUT" && sha256sum -- *.tar.gz >SHA256SUMS)
echo
echo "dist/ (version $VERSION):"
for b in "${built[@]}"; do echo "  built    $b"; done
for s in "${skipped[@]}"; do echo "  skipped  $s"; done
echo "  SHA256SUMS"
