#!/usr/bin/env bash
# Builds the S3-compatible object store the backup tests and the demo use (versitygw, posix
# backend; README.md beside this file says why this one) from its Go module, once per version,
# into .localkube/objectstore/bin. Go's own caches (GOMODCACHE, GOCACHE) keep the sources and
# the compiled packages, so a second machine state with them is a few seconds.
#
#   tests/objectstore/build.sh        # prints the binary's path
set -euo pipefail

VERSITYGW_VERSION=v1.8.0
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN_DIR=${OBJECTSTORE_BIN_DIR:-$ROOT/.localkube/objectstore/bin}
STAMP=$BIN_DIR/.versitygw-$VERSITYGW_VERSION
GO=${GO:-go}

if [[ -x $BIN_DIR/versitygw && -e $STAMP ]]; then
	echo "$BIN_DIR/versitygw"
	exit 0
fi

mkdir -p "$BIN_DIR"
# A static binary built as its release is (its Makefile's version variables); go install reads
# the module's own go.mod, so its dependencies never meet the repository's Go modules.
GOBIN=$BIN_DIR CGO_ENABLED=0 GOFLAGS=-buildvcs=false "$GO" install -trimpath \
	-ldflags "-s -w -X main.Version=$VERSITYGW_VERSION -X main.Build=module -X main.BuildTime=none" \
	"github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" >&2
"$BIN_DIR/versitygw" --version >&2
rm -f "$BIN_DIR"/.versitygw-* && touch "$STAMP"
echo "$BIN_DIR/versitygw"
