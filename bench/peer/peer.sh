#!/usr/bin/env bash
# The official Go Valkey operator on the same test cluster, for the side-by-side figures of
# docs/benchmarks.md (bench/peer/README.md says what is measured and why by hand).
#
#   PEER_SRC=<checkout> bench/peer/peer.sh build       # go build its manager into .peer/bin
#   bench/peer/peer.sh install                         # its CRDs in place of ours (see below)
#   bench/peer/peer.sh start | stop                    # its manager, from this host
#   bench/peer/peer.sh fleet [N]                       # N clusters of 3 created at once (10)
#   bench/peer/peer.sh failover                        # one 3×1 cluster, its failover pause
#   bench/peer/peer.sh restore                         # our CRDs back
#
# Both operators define ValkeyCluster and ValkeyNode in valkey.io/v1alpha1, so only one set of
# those two CRDs can be installed: `install` deletes ours (and every object of those kinds), so
# run it with our controllers stopped, on a test cluster. On KUBECONFIG, else on localkube.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STATE=$ROOT/.peer
KUBECONFIG=${KUBECONFIG:-$ROOT/.localkube/kubeconfig}
export KUBECONFIG
KUBECTL=${KUBECTL:-$(command -v kubectl || echo "$ROOT/.localkube/bin/kubectl")}
METRICS=127.0.0.1:18080
HEALTH=127.0.0.1:18081
SHARED=(valkeyclusters.valkey.io valkeynodes.valkey.io)
# Valkey 9.1 (the peer needs 9.0 or later: shutdown-on-sigterm failover), its exporter off
# (ours is opt-in too), small requests.
SPEC_COMMON='image: valkey/valkey:9.1
  exporter: {enabled: false}
  resources: {requests: {cpu: 50m, memory: 64Mi}}'

k() { "$KUBECTL" "$@"; }
say() { echo "peer: $*" >&2; }
manager_pid() { cat "$STATE/manager.pid" 2>/dev/null || true; }

build() {
  : "${PEER_SRC:?set PEER_SRC to a checkout of the official operator (github.com/valkey-io/valkey-operator)}"
  mkdir -p "$STATE/bin"
  (cd "$PEER_SRC" && go build -o "$STATE/bin/manager" ./cmd)
  git -C "$PEER_SRC" rev-parse HEAD >"$STATE/bin/SOURCE" 2>/dev/null || echo "$PEER_SRC" >"$STATE/bin/SOURCE"
  cp -r "$PEER_SRC/config/crd/bases" "$STATE/crds"
  say "built $STATE/bin/manager from $(cat "$STATE/bin/SOURCE")"
}

install() {
  [ -d "$STATE/crds" ] || { say "no CRDs: run build first"; exit 1; }
  if pgrep -f "/(node|cluster)-controller( |$)" >/dev/null; then
    say "our controllers are running: stop them first"; exit 1
  fi
  k delete crd "${SHARED[@]}" --ignore-not-found --wait=true --timeout=180s
  k apply --server-side -f "$STATE/crds"
  k wait --for=condition=Established crd "${SHARED[@]}" --timeout=60s
}

restore() {
  k delete crd "${SHARED[@]}" --ignore-not-found --wait=true --timeout=180s
  k apply --server-side -f "$ROOT/charts/valkey-operator/crds"
}

start() {
  [ -x "$STATE/bin/manager" ] || { say "no manager: run build first"; exit 1; }
  [ -n "$(manager_pid)" ] && kill -0 "$(manager_pid)" 2>/dev/null && { say "already running"; return; }
  setsid "$STATE/bin/manager" --kubeconfig "$KUBECONFIG" --leader-elect=false \
    --health-probe-bind-address "$HEALTH" --metrics-bind-address "$METRICS" \
    --metrics-secure=false --zap-log-level=info </dev/null >>"$STATE/manager.log" 2>&1 &
  echo $! >"$STATE/manager.pid"
  for _ in $(seq 60); do
    curl -fsS "http://$HEALTH/readyz" >/dev/null 2>&1 && { say "manager ready (pid $!)"; return; }
    sleep 0.5
  done
  say "manager not ready after 30 s: $STATE/manager.log"; exit 1
}

stop() {
  local pid; pid=$(manager_pid)
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -f "$STATE/manager.pid"
}

cluster() { # name shards replicas
  printf 'apiVersion: valkey.io/v1alpha1\nkind: ValkeyCluster\nmetadata: {name: %s}\nspec:\n  shards: %s\n  replicas: %s\n  %s\n---\n' \
    "$1" "$2" "$3" "$SPEC_COMMON"
}

ready_count() { # namespace shards
  k get valkeyclusters -n "$1" -o jsonpath='{range .items[*]}{.status.state}/{.status.readyShards}{"\n"}{end}' |
    grep -c "^Ready/$2$" || true
}

# The manager's API requests so far, by method (client-go's counter, which controller-runtime
# serves), and its resident set and CPU from /proc.
requests() { curl -fsS "http://$METRICS/metrics" | awk -F'[{},"= ]+' '/^rest_client_requests_total\{/ {
  for (i = 2; i < NF; i++) if ($i == "method") m = $(i + 1); n[m] += $NF } END { for (m in n) print m, n[m] }' | sort; }
usage() { local pid; pid=$(manager_pid)
  awk '/^(VmRSS|RssAnon|RssFile|VmHWM):/ {printf "%s %.1f MiB  ", $1, $2 / 1024}' "/proc/$pid/status"
  awk -v t="$(getconf CLK_TCK)" '{printf "cpu %.2f s\n", ($14 + $15) / t}' "/proc/$pid/stat"; }
cpu_seconds() { awk -v t="$(getconf CLK_TCK)" '{print ($14 + $15) / t}' "/proc/$(manager_pid)/stat"; }

fleet() {
  local n=${1:-10} ns=peer-fleet start ready rest=${PEER_REST_SECONDS:-60}
  k create namespace "$ns" >/dev/null
  local manifest=""
  for i in $(seq -f %02g 0 $((n - 1))); do manifest+=$(cluster "f$i" 3 0); manifest+=$'\n'; done
  start=$(date +%s.%N)
  echo "$manifest" | k apply -n "$ns" -f - >/dev/null
  until [ "$(ready_count "$ns" 3)" -eq "$n" ]; do sleep 0.2; done
  ready=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  echo "$n clusters of 3 Ready $ready s after the apply"
  sleep "${PEER_SETTLE_SECONDS:-60}"
  local before after c0 c1
  before=$(requests); c0=$(cpu_seconds); usage
  sleep "$rest"
  after=$(requests); c1=$(cpu_seconds); usage
  awk -v a="$c0" -v b="$c1" -v r="$rest" 'BEGIN {printf "CPU at rest: %.2f s a minute\n", (b - a) * 60 / r}'
  echo "requests a minute at rest, by method:"
  join -a1 -e0 -o 0,1.2,2.2 <(echo "$after") <(echo "$before") |
    awk -v r="$rest" '{printf "  %s %.1f\n", $1, ($2 - $3) * 60 / r}'
  k delete namespace "$ns" --wait=true --timeout=300s >/dev/null
}

failover() {
  local ns=peer-failover
  k create namespace "$ns" >/dev/null
  cluster peer 3 1 | k apply -n "$ns" -f - >/dev/null
  until [ "$(ready_count "$ns" 3)" -eq 1 ]; do sleep 1; done
  (cd "$ROOT" && SIDE_NAMESPACE=$ns SIDE_OPERATOR="the official operator" \
    cargo test -p e2e --test bench -- --ignored --nocapture bench_failover_side_by_side)
  k delete namespace "$ns" --wait=true --timeout=300s >/dev/null
}

case "${1:-}" in
  build|install|restore|start|stop|failover) "$1" ;;
  fleet) fleet "${2:-10}" ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
