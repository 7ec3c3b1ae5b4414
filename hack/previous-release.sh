#!/usr/bin/env bash
# The previous release, for the operator-upgrade test: its chart, unpacked at
# target/previous-release/src/charts/valkey-operator, and its two controllers built from the same
# commit into localkube's image table as valkey-operator/{node,cluster}-controller:previous.
#
# It builds in this checkout's target/ (the dependencies are mostly the same, so only the
# workspace's own crates compile), which leaves the old binaries in target/debug/: the caller runs
# `cargo build --workspace --bins` afterwards (make test's `build` does), which links this
# checkout's binaries there again. Skipped when the images of that commit are already there.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LK=${LOCALKUBE_DIR:-$ROOT/.localkube}
# shellcheck source=previous-release.env
source "$ROOT/hack/previous-release.env"
COMMIT=$PREVIOUS_RELEASE_COMMIT
OUT=$ROOT/target/previous-release
STAMP=$LK/images/.previous-release-$COMMIT

log() { printf 'previous-release: %s\n' "$*" >&2; }
die() { printf 'previous-release: error: %s\n' "$*" >&2; exit 1; }

if [[ -f $STAMP && -d $OUT/src/charts/valkey-operator ]]; then
	log "$PREVIOUS_RELEASE_VERSION ($COMMIT) up to date"
	exit 0
fi
have_commit() { git -C "$ROOT" cat-file -e "$COMMIT^{commit}" 2>/dev/null; }
# A shallow clone lacks the release commit: fetch just that commit from where it came from.
if ! have_commit && git -C "$ROOT" remote get-url origin >/dev/null 2>&1; then
	log "fetching $COMMIT from origin (shallow clone)"
	git -C "$ROOT" fetch --quiet --depth=1 origin "$COMMIT" || true
fi
have_commit ||
	die "commit $COMMIT (release $PREVIOUS_RELEASE_VERSION) is not in this clone and could not be fetched; 'git fetch --unshallow' brings it"

log "unpacking $PREVIOUS_RELEASE_VERSION ($COMMIT) into $OUT/src"
rm -rf "$OUT/src"
mkdir -p "$OUT/src"
git -C "$ROOT" archive "$COMMIT" | tar -x -C "$OUT/src"
log "building its controllers"
(cd "$OUT/src" && cargo build --workspace --bins --target-dir "$ROOT/target")
for c in node-controller cluster-controller; do
	dst=$LK/images/$c-previous/bin
	mkdir -p "$dst"
	cp "$ROOT/target/debug/$c" "$dst/$c.tmp"
	mv "$dst/$c.tmp" "$dst/$c"
done
rm -f "$LK"/images/.previous-release-*
touch "$STAMP"
log "images valkey-operator/{node,cluster}-controller:previous are release $PREVIOUS_RELEASE_VERSION"
