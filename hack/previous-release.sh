#!/usr/bin/env bash
# The previous release, for the operator-upgrade test: its chart, unpacked at
# target/previous-release/src/charts/valkey-operator, and its two controllers built from the same
# commit into localkube's image table as valkey-operator/{node,cluster}-controller:previous.
#
# It builds in this checkout's target/ (the dependencies are mostly the same, so only the
# workspace's own crates compile); it then cleans the workspace crates it built, which share names
# and hashes with this checkout's, so the next build (make test's `build`) compiles this
# checkout's. Skipped when the images of that commit are already there.
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
# The old build left its workspace crates in target/ under the names and hashes this checkout's
# have (cargo hashes a member by name, version and path relative to the workspace), with
# fingerprints naming their sources relative to each crate: the next build would take them for
# this checkout's and keep an old binary (the localkube kubelet, for one). Clean them all.
members=$(cd "$ROOT" && cargo metadata --no-deps --format-version 1 |
	python3 -c 'import json, sys; print(" ".join("-p " + p["name"] for p in json.load(sys.stdin)["packages"]))')
log "cleaning the workspace crates it overwrote"
# shellcheck disable=SC2086 # one word per -p and package name
(cd "$ROOT" && cargo clean --quiet $members)
rm -f "$LK"/images/.previous-release-*
touch "$STAMP"
log "images valkey-operator/{node,cluster}-controller:previous are release $PREVIOUS_RELEASE_VERSION"
