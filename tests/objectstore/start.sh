#!/usr/bin/env bash
# Starts the test object store on a loopback address with a fresh folder and known credentials,
# for trying things by hand (the tests start their own: backup/tests/common/objectstore.rs).
#
#   tests/objectstore/start.sh [ADDRESS] [DIR]    # default 127.0.0.1:7070, a new temporary folder
#
# It runs in the foreground until interrupted; the bucket "backups" exists from the start.
# Credentials: access key "backup-test", secret key "backup-test-secret".
set -euo pipefail

ADDRESS=${1:-127.0.0.1:7070}
DIR=${2:-$(mktemp -d -t objectstore.XXXXXX)}
BIN=$(bash "$(dirname "${BASH_SOURCE[0]}")/build.sh")

# The posix backend serves each top folder of DIR as a bucket.
mkdir -p "$DIR/backups"
echo "object store: http://$ADDRESS (path-style), bucket backups, folder $DIR" >&2
exec "$BIN" --port "$ADDRESS" --access backup-test --secret backup-test-secret --quiet \
	posix "$DIR"
