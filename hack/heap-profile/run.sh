#!/usr/bin/env bash
# Runs a controller under heaptrack's allocation tracer, for the fleet benchmark's heap profile
# (see bench/README.md#fleet): put a link to this script, named as the controller, in a folder
# and point OPERATOR_BIN_DIR at it. HEAP_PROFILE_BIN: where the real binaries are;
# HEAP_PROFILE_DIR: where each controller's trace goes (<name>.zst).
#
# The benchmark stops a controller with SIGTERM, and a graceful stop frees what the profile is
# about; so the controller runs as a child here and SIGTERM becomes SIGKILL: heaptrack then
# counts everything still allocated at that moment as not freed, which is the heap at rest.
set -euo pipefail
name=$(basename "$0")
: "${HEAP_PROFILE_BIN:?the folder of the real binaries}"
: "${HEAP_PROFILE_DIR:?where the traces go}"
lib=/usr/lib/heaptrack
mkdir -p "$HEAP_PROFILE_DIR"
fifo="$HEAP_PROFILE_DIR/$name.fifo"
rm -f "$fifo" && mkfifo "$fifo"
"$lib/libexec/heaptrack_interpret" <"$fifo" | zstd -q -c >"$HEAP_PROFILE_DIR/$name.zst" &
interpreter=$!
LD_PRELOAD="$lib/libheaptrack_preload.so" DUMP_HEAPTRACK_OUTPUT="$fifo" \
    "$HEAP_PROFILE_BIN/$name" "$@" &
child=$!
trap 'kill -KILL "$child" 2>/dev/null' TERM INT
wait "$child" || true
wait "$interpreter" || true
rm -f "$fifo"
