#!/usr/bin/env bash
# Checks, and installs from Debian's packages when missing, the machine tools localkube needs:
# ip (iproute2), nft (nftables, for fault injection), patchelf, python3 with pip, apt-get and
# dpkg, and what building Valkey 9.1 with TLS needs (make, a C compiler, OpenSSL's headers). Go
# (1.26 or newer) must already be there: Debian bookworm's own Go is too old to build
# Kubernetes 1.36.
set -euo pipefail

missing=()
command -v ip >/dev/null || missing+=(iproute2)
command -v nft >/dev/null || missing+=(nftables)
command -v patchelf >/dev/null || missing+=(patchelf)
command -v python3 >/dev/null || missing+=(python3)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
command -v make >/dev/null || missing+=(make)
command -v cc >/dev/null || missing+=(gcc)
[[ -f /usr/include/openssl/ssl.h ]] || missing+=(libssl-dev)
if ((${#missing[@]})); then
	echo "prereqs: installing ${missing[*]} (Debian's packages)" >&2
	apt-get install -y -q "${missing[@]}" >/dev/null ||
		{ apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null; }
fi
command -v apt-get >/dev/null && command -v dpkg >/dev/null || { echo "prereqs: apt-get and dpkg are needed" >&2; exit 1; }

go_version=$(go env GOVERSION 2>/dev/null || true)
if [[ ! $go_version =~ ^go1\.([0-9]+) ]] || ((BASH_REMATCH[1] < 26)); then
	echo "prereqs: Go 1.26 or newer is needed to build localkube (found: ${go_version:-none})" >&2
	exit 1
fi
