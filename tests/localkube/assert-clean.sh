#!/usr/bin/env bash
# Fails when the local cluster left anything on the machine: a process (the control plane, the
# process kubelet, a pod, a client in the outside namespace, the real node's), a mount under
# .localkube, an lk-* network namespace (lk-outside included), the real node's cgroups, the lkbr0
# bridge, the outside namespace's link lkout0, localkube's or kube-proxy's nftables tables, or a
# fault still in force (an lkfault_* nftables table, a fault record, a stopped node).
# Run after "make localkube-down"; it changes nothing.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LK=${LOCALKUBE_DIR:-$ROOT/.localkube}
LK=$(realpath -m "$LK")
BRIDGE=lkbr0
POD_MARKER=KUBERNETES_SERVICE_HOST=10.213.0.1

problems=()

# Network namespaces the kubelet names lk-*, by inode, to find the processes inside them.
declare -A pod_ns=()
if [[ -d /run/netns ]]; then
	for ns in /run/netns/lk-*; do
		[[ -e $ns ]] || continue
		problems+=("network namespace $(basename "$ns")")
		pod_ns[$(stat -L -c %i "$ns" 2>/dev/null)]=1
	done
fi

# The image table's programs by device:inode. A pod's process names its program by the path in
# its own mount namespace (/usr/local/bin/valkey-server), and valkey-server overwrites its
# environment with its process title, so neither the path nor the pod marker finds a server
# that left its pod (started with --daemonize: its own session, its parent gone).
declare -A image_programs=()
while read -r id; do
	image_programs[$id]=1
done < <(find -L "$LK/images" -path '*/bin/*' -type f -exec stat -L -c %d:%i {} + 2>/dev/null)

# Our own network namespace is the host one (pid 1 may be outside this sandbox).
host_ns=$(stat -L -c %i /proc/self/ns/net)
# This script, its parents and its own pipelines are never leftovers.
declare -A skip=()
pid=$$
while [[ $pid -gt 1 ]]; do
	skip[$pid]=1
	pid=$(awk '{print $4}' "/proc/$pid/stat" 2>/dev/null || echo 1)
done

for dir in /proc/[0-9]*; do
	pid=${dir#/proc/}
	[[ -n ${skip[$pid]:-} || $pid == "$BASHPID" ]] && continue
	state=$(awk '{print $3}' "$dir/stat" 2>/dev/null) || continue
	[[ $state == Z || -z $state ]] && continue
	exe=$(readlink "$dir/exe" 2>/dev/null) || exe=""
	exe=${exe% (deleted)}
	exe_id=$(stat -L -c %d:%i "$dir/exe" 2>/dev/null) || exe_id=""
	ns=$(stat -L -c %i "$dir/ns/net" 2>/dev/null) || ns=""
	why=""
	args=$(tr '\0' '\n' 2>/dev/null <"$dir/cmdline" | tail -n +2)
	# The same binary run for another purpose (a test's own etcd, a kubectl command) names no
	# path of this cluster and is not a leftover.
	if [[ -n $exe && $exe == "$LK"/images/* ]]; then
		why="runs a program from the image table"
	elif [[ -n $exe && $exe == "$LK"/* && $args == *"$LK"* ]]; then
		why="runs a program under $LK for this cluster"
	elif [[ $(basename "$exe") == localkube-kubelet ]]; then
		why="is the process kubelet"
	elif [[ -n $exe_id && -n ${image_programs[$exe_id]:-} ]]; then
		why="runs a program from the image table (as $exe, in a mount namespace of its own)"
	elif [[ -n $ns && -n ${pod_ns[$ns]:-} ]]; then
		why="is in a pod network namespace"
	elif [[ -n $ns && $ns != "$host_ns" ]] && tr '\0' '\n' 2>/dev/null <"$dir/environ" | grep -qx "$POD_MARKER"; then
		why="has a pod's environment"
	fi
	if [[ -n $why ]]; then
		cmd=$(tr '\0' ' ' 2>/dev/null <"$dir/cmdline" | cut -c1-160)
		problems+=("process $pid $why: $cmd")
	fi
done

while read -r mp; do
	problems+=("mount $mp")
done < <(awk -v lk="$LK" '$5 == lk || index($5, lk "/") == 1 {print $5}' /proc/self/mountinfo)

# The real node's cgroups (the kubelet's cgroupRoot, "localkube" in every hierarchy) and what
# runs in them: its pods' containers. Its kubelet, containerd, shims and registry run programs
# under $LK and are found above.
for cg in /sys/fs/cgroup/*/localkube /sys/fs/cgroup/localkube; do
	[[ -d $cg ]] || continue
	while read -r procs; do
		for pid in $(cat "$procs" 2>/dev/null); do
			problems+=("process $pid in the real node's cgroup ${procs%/cgroup.procs}")
		done
	done < <(find "$cg" -name cgroup.procs)
	problems+=("cgroup $cg")
done

if ip link show "$BRIDGE" >/dev/null 2>&1; then
	problems+=("bridge $BRIDGE")
fi
if ip link show lkout0 >/dev/null 2>&1; then
	problems+=("link lkout0 (the outside namespace's)")
fi

# kube-proxy's rules (it leaves them when it stops) and localkube's own table.
if command -v nft >/dev/null; then
	while read -r family table; do
		problems+=("nftables table $family $table")
	done < <(nft list tables 2>/dev/null | awk '($2 == "inet" && $3 == "localkube") || (($2 == "ip" || $2 == "ip6") && $3 == "kube-proxy") {print $2, $3}')
fi

# Faults ("localkube fault"): nftables tables, records, stopped nodes.
if command -v nft >/dev/null; then
	while read -r table; do
		problems+=("nftables table inet $table")
	done < <(nft list tables inet 2>/dev/null | awk '$3 ~ /^lkfault_/ {print $3}')
fi
for f in "$LK"/faults/*.json "$LK"/kubelet/faults/*; do
	[[ -e $f && $f != *.applied ]] && problems+=("fault file $f")
done

if ((${#problems[@]})); then
	echo "assert-clean: FAIL: the local cluster left ${#problems[@]} thing(s) behind:" >&2
	printf '  %s\n' "${problems[@]}" >&2
	exit 1
fi
echo "assert-clean: OK: no process, mount under $LK, lk-* network namespace, real node cgroup, $BRIDGE bridge, nftables table or fault remains"
