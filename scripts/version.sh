#!/usr/bin/env bash
# Prints the version of the working tree, from `git describe --tags --always
# --dirty` over the version tags (vMAJOR.MINOR.PATCH[-PRERELEASE]), as a
# semantic version — Nomad's plugin loader refuses a plugin whose version
# does not parse as one:
#
#   on a tag v1.2.3                  1.2.3
#   3 commits past it                1.2.3+3.gabc1234
#   … with uncommitted changes       1.2.3+3.gabc1234.dirty
#   no version tag (commit abc1234)  BASE+gabc1234   (BASE: $1, default 0.1.0-dev)
#
# Outside a git work tree it prints BASE. A version tag that is not a
# semantic version is an error naming it. The make targets pass the result to
# the linker (-X github.com/llmgw/llmgw/internal/version.Version=…).
set -euo pipefail
base=${1:-0.1.0-dev}
cd "${VERSION_DIR:-$(dirname "$0")/..}"

if ! desc=$(git describe --tags --always --dirty --match 'v[0-9]*' 2>/dev/null); then
	echo "$base"
	exit 0
fi

meta=()
if [[ $desc == *-dirty ]]; then
	desc=${desc%-dirty}
	dirty=1
else
	dirty=0
fi

semver='^v?([0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?)$'
if [[ $desc =~ ^(.*)-([0-9]+)-g([0-9a-f]+)$ ]]; then
	# TAG-N-gHASH: N commits past TAG.
	tag=${BASH_REMATCH[1]}
	meta+=("${BASH_REMATCH[2]}" "g${BASH_REMATCH[3]}")
elif [[ $desc =~ ^[0-9a-f]+$ ]] && ! git rev-parse -q --verify "refs/tags/$desc" >/dev/null; then
	# No version tag: the abbreviated commit.
	tag=""
	meta+=("g$desc")
else
	tag=$desc
fi
if ((dirty)); then
	meta+=(dirty)
fi

if [[ -z $tag ]]; then
	version=$base
elif [[ $tag =~ $semver ]]; then
	version=${BASH_REMATCH[1]}
else
	echo "scripts/version.sh: tag $tag is not a semantic version (vMAJOR.MINOR.PATCH[-PRERELEASE])" >&2
	exit 1
fi
if ((${#meta[@]})); then
	sep="+"
	[[ $version == *+* ]] && sep="."
	version+="$sep$(
		IFS=.
		echo "${meta[*]}"
	)"
fi
echo "$version"
