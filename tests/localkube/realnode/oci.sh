#!/usr/bin/env bash
# Builds OCI images without a container engine and writes each as an OCI archive (a tar of an OCI
# image layout, what `skopeo copy oci-archive:...` and `docker load` read):
#
#   oci.sh controllers OUT TAG BIN_DIR  valkey-operator/{node,cluster}-controller:TAG from the
#                                       static binaries in BIN_DIR, into OUT (make images)
#   oci.sh test-controllers OUT TAG BIN_DIR
#                                       the same images from the dynamically linked (glibc)
#                                       binaries in BIN_DIR, debug info stripped, on Debian's
#                                       glibc: the workspace's debug build (make test-images)
#   oci.sh localkube [OUT]              the real node's images from what images.sh assembled, into
#                                       OUT (default .localkube/oci): valkey/valkey 9.1 and 8.0,
#                                       oliver006/redis_exporter, and the sandbox image
#
# Each image NAME is OUT/NAME.oci.tar, beside NAME.refs (the references it is pushed as, one a
# line) and NAME.inputs (the digest of everything it was built from): an image whose inputs did
# not change is not built again. The same files give the same digest on any machine: the layer is
# written by layer.py (names sorted, times 0, owners from rules) and every date is the epoch.
#
# The tools: umoci (Debian's package) builds the image layout: it needs no daemon, no storage
# driver and no root, and takes a layer tar as it is, so the layer's bytes are ours. Debian's
# packages give the libraries the Valkey binaries link against and the CA certificates, fetched
# with images.sh's private apt configuration (nothing is installed on the machine).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../images.sh
source "$HERE/../images.sh" # ROOT, LK, IMAGES and the private apt functions
log() { printf 'oci: %s\n' "$*" >&2; }
die() { printf 'oci: error: %s\n' "$*" >&2; exit 1; }

EPOCH=1970-01-01T00:00:00Z
REALNODE_BUILD=$LK/build/realnode
# What the dynamically linked Valkey binaries need beyond their own bundled lib/ (images.sh):
# glibc, and Debian 8.0's libsystemd with what it links against. Checked after assembly: every
# library the loader resolves must come from inside the image.
VALKEY_BASE_PACKAGES=(libc6 libgcc-s1 libstdc++6 libsystemd0 libcap2 libgcrypt20 libgpg-error0 liblz4-1 liblzma5 libzstd1)
# Debian's prometheus-redis-exporter links glibc.
EXPORTER_BASE_PACKAGES=(libc6)
# The workspace's dynamically linked binaries (test-controllers) need glibc (libc, libm, the
# loader) and libgcc_s (readelf -d: NEEDED); checked after assembly like the others.
CONTROLLER_BASE_PACKAGES=(libc6 libgcc-s1)
CA_PACKAGE=ca-certificates

command -v umoci >/dev/null || die "umoci is missing (Debian's package; tests/localkube/realnode/prereqs.sh installs it)"

# inputs_digest FILE... : one digest over the files' contents and this script's own sources, plus
# whatever the caller adds on standard input (config, references).
inputs_digest() {
	{
		cat
		sha256sum "$HERE/oci.sh" "$HERE/layer.py" | cut -d' ' -f1
		local f
		for f in "$@"; do
			[[ -e $f ]] || die "input $f is missing"
			printf '%s ' "$(basename "$f")"
			if [[ -L $f ]]; then readlink "$f"; else sha256sum <"$f" | cut -d' ' -f1; fi
		done
	} | sha256sum | cut -d' ' -f1
}

# up_to_date OUT NAME DIGEST
up_to_date() {
	[[ -f $1/$2.oci.tar && -f $1/$2.refs && $(cat "$1/$2.inputs" 2>/dev/null) == "$3" ]]
}

# pack OUT NAME ROOTFS DIGEST "OWNER RULES" "CONFIG FLAGS" REF...: the layer, the image layout, the
# archive. The first reference's tag tags the layout.
pack() {
	local out=$1 name=$2 rootfs=$3 digest=$4 owners=$5 config=$6
	shift 6
	local refs=("$@") work
	work=$(mktemp -d)
	# shellcheck disable=SC2086 # the rules and flags are word lists
	python3 "$HERE/layer.py" "$rootfs" "$work/layer.tar" $owners
	local tag=${refs[0]##*:}
	umoci init --layout "$work/layout"
	umoci new --image "$work/layout:$tag"
	umoci raw add-layer --image "$work/layout:$tag" --history.created "$EPOCH" \
		--history.created_by "tests/localkube/realnode/oci.sh ($name)" "$work/layer.tar"
	# shellcheck disable=SC2086
	umoci config --image "$work/layout:$tag" --created "$EPOCH" --history.created "$EPOCH" \
		--history.created_by "tests/localkube/realnode/oci.sh ($name config)" $config
	umoci gc --layout "$work/layout"
	mkdir -p "$out"
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/layout" -cf "$out/$name.oci.tar.tmp" oci-layout index.json blobs
	mv "$out/$name.oci.tar.tmp" "$out/$name.oci.tar"
	printf '%s\n' "${refs[@]}" >"$out/$name.refs"
	echo "$digest" >"$out/$name.inputs"
	local manifest
	manifest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$work/layout/index.json")
	rm -rf "$work"
	log "$name: $(du -h "$out/$name.oci.tar" | cut -f1) $manifest as ${refs[*]}"
}

# Debian's packages, unpacked once per package list into .localkube/build (kept: a changed image
# does not fetch them again). Prints the directory.
debian_root() {
	local dir
	dir=$REALNODE_BUILD/debian-$(printf '%s\n' "$@" | sha256sum | cut -c1-12)
	if [[ ! -f $dir/.done ]]; then
		log "apt-get download $* (Debian bookworm)"
		rm -rf "$dir"
		mkdir -p "$dir/root"
		apt_download "$dir/apt" "$@" >&2
		local deb
		for deb in "$dir"/apt/debs/*.deb; do dpkg -x "$deb" "$dir/root"; done
		touch "$dir/.done"
	fi
	echo "$dir/root"
}

# base_copy BASE ROOTFS: a debian_root as an image's base, without documentation, locales and
# iconv modules: nothing a server reads.
base_copy() {
	local base=$1 rootfs=$2
	cp -a "$base/." "${rootfs:?}/"
	rm -rf "${rootfs:?}/usr/share" "$rootfs/usr/lib/x86_64-linux-gnu/gconv" "$rootfs/etc/ld.so.conf.d"
}

# The CA bundle as update-ca-certificates writes it: every certificate Debian ships, in name order.
ca_bundle() {
	local root
	root=$(debian_root "$CA_PACKAGE")
	find "$root/usr/share/ca-certificates/mozilla" -name '*.crt' | LC_ALL=C sort | xargs cat
}

# /etc/passwd and /etc/group of an image: root, nobody and one user (NAME UID HOME).
accounts() {
	local rootfs=$1 user=$2 id=$3 home=$4
	mkdir -p "$rootfs/etc"
	printf '%s\n' "root:x:0:0:root:/root:/usr/sbin/nologin" "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin" \
		"$user:x:$id:$id:$user:$home:/usr/sbin/nologin" >"$rootfs/etc/passwd"
	printf '%s\n' "root:x:0:" "nogroup:x:65534:" "$user:x:$id:" >"$rootfs/etc/group"
	chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
}

# A controller's image, as the root Dockerfile's distroless base lays it out: the binary as
# /usr/local/bin/controller, CA certificates, the nonroot user (65532) with its home, /tmp; no shell.
# Further programs (EXTRA...) go beside it in /usr/local/bin: the node-controller's image carries
# valkey-restore, the init container of a member restored from a backup.
# LINKING says what the programs are and what goes under them:
#   static  static programs (make images), copied as they are; no libc
#   glibc   dynamically linked programs (make test-images: the debug build), copied without their
#           debug info onto Debian's glibc (CONTROLLER_BASE_PACKAGES), every library they need
#           checked to come from the image
controller_image() {
	local out=$1 tag=$2 linking=$3 bin=$4 name=$5
	shift 5
	local extra=("$@") prog interpreters
	for prog in "$bin" "${extra[@]}"; do
		[[ -x $prog ]] || die "$prog is missing (make images builds the static ones, make build the others)"
		interpreters=$(readelf -lW "$prog" | grep -c 'program interpreter' || true)
		case $linking in
		static) ((interpreters == 0)) || die "$prog is not statically linked" ;;
		glibc) ((interpreters > 0)) || die "$prog is statically linked (oci.sh controllers packs it)" ;;
		*) die "linking $linking: static or glibc" ;;
		esac
	done
	local refs=("${IMAGE_PREFIX:-valkey-operator}/$name:$tag")
	local packages=() inputs=("$bin" "${extra[@]}") base=
	if [[ $linking == glibc ]]; then
		packages=("${CONTROLLER_BASE_PACKAGES[@]}")
		base=$(debian_root "${packages[@]}")
		inputs+=("$base/../.done")
	fi
	local digest
	digest=$(printf '%s\n' "$name" "$linking" "${refs[@]}" "${packages[@]}" | inputs_digest "${inputs[@]}")
	if up_to_date "$out" "$name" "$digest"; then
		log "$name up to date"
		return
	fi
	local rootfs
	rootfs=$(mktemp -d)
	[[ -z $base ]] || base_copy "$base" "$rootfs"
	install_program "$linking" "$rootfs" "$bin" controller
	for prog in "${extra[@]}"; do
		install_program "$linking" "$rootfs" "$prog" "$(basename "$prog")"
	done
	accounts "$rootfs" nonroot 65532 /home/nonroot
	install -d -m 0700 "$rootfs/home/nonroot"
	install -d -m 1777 "$rootfs/tmp"
	mkdir -p "$rootfs/etc/ssl/certs"
	ca_bundle >"$rootfs/etc/ssl/certs/ca-certificates.crt"
	pack "$out" "$name" "$rootfs" "$digest" "--owner home/nonroot=65532:65532" \
		"--config.user 65532:65532 --config.entrypoint /usr/local/bin/controller \
		--config.env PATH=/usr/local/bin:/usr/bin:/bin \
		--config.label org.opencontainers.image.title=$name --config.label org.opencontainers.image.version=$tag" \
		"${refs[@]}"
	rm -rf "$rootfs"
}

# install_program LINKING ROOTFS PROGRAM NAME: PROGRAM as ROOTFS/usr/local/bin/NAME. A dynamically
# linked one loses its debug info (most of a debug build's size; the image needs none of it) and
# must find every library it needs inside ROOTFS.
install_program() {
	local linking=$1 rootfs=$2 prog=$3 dst=$2/usr/local/bin/$4
	install -d "$rootfs/usr/local/bin"
	if [[ $linking == static ]]; then
		install -m 0755 "$prog" "$dst"
		return
	fi
	objcopy --strip-debug "$prog" "$dst"
	chmod 0755 "$dst"
	check_libraries "$rootfs" "$dst"
}

# controllers OUT TAG BIN_DIR LINKING: both controllers' images (controller_image).
controllers() {
	local out=$1 tag=$2 bin_dir=$3 linking=$4
	[[ -n $tag ]] || die "no tag"
	controller_image "$out" "$tag" "$linking" "$bin_dir/node-controller" node-controller "$bin_dir/valkey-restore"
	controller_image "$out" "$tag" "$linking" "$bin_dir/cluster-controller" cluster-controller
}

# The loader's view of a binary inside ROOTFS: fails unless every library it needs resolves to a
# file of the image (not of the machine building it), with every symbol version it asks for (a
# binary linked against a newer glibc than the image's lists it, says "version ... not found" and
# still exits 0).
check_libraries() {
	local rootfs=$1 bin=$2
	local paths="$rootfs/usr/local/lib:$rootfs/lib/x86_64-linux-gnu:$rootfs/usr/lib/x86_64-linux-gnu"
	local listing
	listing=$("$rootfs/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" --library-path "$paths" --list "$bin" 2>&1) ||
		die "$bin does not load in its image: $listing"
	[[ $listing != *"not found"* ]] || die "$bin does not load in its image: $listing"
	local outside
	outside=$(awk '/=>/ && $3 !~ /^\(/ {print $3}' <<<"$listing" | while read -r lib; do
		[[ $(realpath -m "$lib") == "$rootfs"/* ]] || echo "$lib"
	done)
	[[ -z $outside ]] || die "$bin needs libraries its image lacks: $outside"
}

# Valkey as the official valkey/valkey image lays it out: valkey-server and valkey-cli (and the
# valkey-server aliases) in /usr/local/bin on PATH, the valkey user and group 999, /data owned by
# it as the volume and working directory, an entrypoint that drops root to that user, CMD
# valkey-server, port 6379. No shell: valkey-entrypoint does the entrypoint script's work.
valkey_image() {
	local out=$1 name=$2 version=$3
	shift 3
	local refs=("$@") src=$IMAGES/$name
	[[ -x $src/bin/valkey-server && -x $src/bin/valkey-cli ]] || die "$src is not assembled (make localkube-tools)"
	local entrypoint=$REALNODE_BUILD/bin/valkey-entrypoint
	local base
	base=$(debian_root "${VALKEY_BASE_PACKAGES[@]}")
	local digest
	digest=$(printf '%s\n' "$name" "$version" "${refs[@]}" "${VALKEY_BASE_PACKAGES[@]}" |
		inputs_digest "$src"/bin/* "$src"/lib/* "$entrypoint" "$base/../.done")
	if up_to_date "$out" "$name" "$digest"; then
		log "$name up to date"
		return
	fi
	local rootfs
	rootfs=$(mktemp -d)
	base_copy "$base" "$rootfs"
	install -D -m 0755 "$src/bin/valkey-server" "$rootfs/usr/local/bin/valkey-server"
	install -m 0755 "$src/bin/valkey-cli" "$entrypoint" "$rootfs/usr/local/bin/"
	local alias
	for alias in valkey-sentinel valkey-check-aof valkey-check-rdb; do
		ln -s valkey-server "$rootfs/usr/local/bin/$alias"
	done
	mkdir -p "$rootfs/usr/local/lib"
	if compgen -G "$src/lib/*" >/dev/null; then cp -L "$src"/lib/* "$rootfs/usr/local/lib/"; fi
	chmod 0644 "$rootfs"/usr/local/lib/*
	check_libraries "$rootfs" "$rootfs/usr/local/bin/valkey-server"
	check_libraries "$rootfs" "$rootfs/usr/local/bin/valkey-cli"
	accounts "$rootfs" valkey 999 /home/valkey
	install -d -m 0755 "$rootfs/data"
	install -d -m 1777 "$rootfs/tmp"
	pack "$out" "$name" "$rootfs" "$digest" "--owner data=999:999" \
		"--config.entrypoint valkey-entrypoint --config.cmd valkey-server \
		--config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --config.env VALKEY_VERSION=$version \
		--config.workingdir /data --config.volume /data --config.exposedports 6379/tcp \
		--config.label org.opencontainers.image.title=valkey --config.label org.opencontainers.image.version=$version" \
		"${refs[@]}"
	rm -rf "$rootfs"
}

# The Redis exporter as oliver006/redis_exporter lays it out: the binary at the root, CA
# certificates, user 59000, port 9121. Debian's build links glibc (upstream's is static), so glibc
# comes along.
exporter_image() {
	local out=$1 bin=$IMAGES/redis_exporter/bin/redis_exporter name=redis_exporter
	local refs=(oliver006/redis_exporter:v1.45.0 oliver006/redis_exporter:latest)
	[[ -x $bin ]] || die "$bin is missing (make localkube-tools)"
	local base
	base=$(debian_root "${EXPORTER_BASE_PACKAGES[@]}")
	local digest
	digest=$(printf '%s\n' "$name" "${refs[@]}" "${EXPORTER_BASE_PACKAGES[@]}" | inputs_digest "$bin" "$base/../.done")
	if up_to_date "$out" "$name" "$digest"; then
		log "$name up to date"
		return
	fi
	local rootfs
	rootfs=$(mktemp -d)
	base_copy "$base" "$rootfs"
	install -D -m 0755 "$bin" "$rootfs/redis_exporter"
	check_libraries "$rootfs" "$rootfs/redis_exporter"
	mkdir -p "$rootfs/etc/ssl/certs"
	ca_bundle >"$rootfs/etc/ssl/certs/ca-certificates.crt"
	pack "$out" "$name" "$rootfs" "$digest" "" \
		"--config.user 59000:59000 --config.entrypoint /redis_exporter --config.exposedports 9121/tcp \
		--config.label org.opencontainers.image.title=redis_exporter" \
		"${refs[@]}"
	rm -rf "$rootfs"
}

# The pod sandbox's image (cmd/pause), under a name of localkube's own.
pause_image() {
	local out=$1 bin=$REALNODE_BUILD/bin/pause name=pause
	local refs=(localkube/pause:1)
	local digest
	digest=$(printf '%s\n' "$name" "${refs[@]}" | inputs_digest "$bin")
	if up_to_date "$out" "$name" "$digest"; then
		log "$name up to date"
		return
	fi
	local rootfs
	rootfs=$(mktemp -d)
	install -D -m 0755 "$bin" "$rootfs/pause"
	pack "$out" "$name" "$rootfs" "$digest" "" \
		"--config.user 65535:65535 --config.entrypoint /pause --config.label org.opencontainers.image.title=pause" \
		"${refs[@]}"
	rm -rf "$rootfs"
}

case ${1:-} in
controllers)
	[[ $# -eq 4 ]] || die "usage: $0 controllers OUT TAG BIN_DIR"
	controllers "$2" "$3" "$4" static
	;;
test-controllers)
	[[ $# -eq 4 ]] || die "usage: $0 test-controllers OUT TAG BIN_DIR"
	controllers "$2" "$3" "$4" glibc
	;;
localkube)
	out=${2:-$LK/oci}
	valkey_image "$out" valkey-9.1 9.1.2 valkey/valkey:9.1 valkey/valkey:9.1.2 valkey/valkey:9 valkey/valkey:latest
	valkey_image "$out" valkey-8.0 8.0.1 valkey/valkey:8.0 valkey/valkey:8.0.1 valkey/valkey:8
	exporter_image "$out"
	pause_image "$out"
	;;
*) die "usage: $0 controllers|test-controllers OUT TAG BIN_DIR | localkube [OUT]" ;;
esac
