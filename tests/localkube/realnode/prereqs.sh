#!/usr/bin/env bash
# Checks, and installs from Debian's packages when missing, what the real node and the images
# built here need beyond localkube's own prerequisites (../prereqs.sh): umoci, which builds the
# OCI images; libseccomp's headers and pkg-config, which runc's seccomp support is compiled
# against (its library, libseccomp2, is in every Debian system); readelf (binutils), which tells
# a static binary from a dynamic one.
set -euo pipefail

missing=()
command -v umoci >/dev/null || missing+=(umoci)
command -v pkg-config >/dev/null || missing+=(pkg-config)
[[ -f /usr/include/seccomp.h ]] || missing+=(libseccomp-dev)
command -v readelf >/dev/null || missing+=(binutils)
if ((${#missing[@]})); then
	echo "realnode prereqs: installing ${missing[*]} (Debian's packages)" >&2
	apt-get install -y -q "${missing[@]}" >/dev/null ||
		{ apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null; }
fi
