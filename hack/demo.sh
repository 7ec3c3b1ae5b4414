#!/usr/bin/env bash
# The demo after `make demo` has built the tools and images and started the local control plane:
# install the chart, apply examples/valkeycluster.yaml, wait until it is Ready, show it, and say
# how to connect and how to stop.
#
# The release watches only the `default` namespace, the one examples/valkeycluster.yaml, the README
# and the chart's NOTES tell a user to apply to, so the e2e tests (each with controllers of its own
# in its own namespace) can run on the same cluster without two operators fighting over objects.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LK=$ROOT/.localkube
KUBECTL=${KUBECTL:-$LK/bin/kubectl}
HELM=${HELM:-$LK/bin/helm}
export KUBECONFIG=${KUBECONFIG:-$LK/kubeconfig}

RELEASE=${DEMO_RELEASE:-valkey-operator}
OPERATOR_NS=${DEMO_OPERATOR_NAMESPACE:-valkey-operator-system}
NS=${DEMO_NAMESPACE:-default}
CLUSTER=cluster-sample
# Deadline for the cluster to become Ready with every node reporting its role.
TIMEOUT=${DEMO_TIMEOUT:-300}
VALKEY_CLI=$LK/images/valkey-8.0/bin/valkey-cli

started=$(date +%s)
step() { printf '\n==> %s\n' "$*"; }
k() { "$KUBECTL" "$@"; }

# Everything a person needs to see why the cluster is not Ready.
diagnose() {
	step "the cluster did not become Ready within ${TIMEOUT}s; what the cluster shows:"
	k describe valkeycluster "$CLUSTER" -n "$NS" || true
	k get valkeynode -n "$NS" -o wide || true
	k get pods -n "$NS" -o wide || true
	k get pods -n "$OPERATOR_NS" -o wide || true
	for pod in $(k get pods -n "$NS" -o jsonpath='{range .items[?(@.status.phase!="Running")]}{.metadata.name}{" "}{end}' 2>/dev/null); do
		k describe pod "$pod" -n "$NS" || true
	done
	# No kubelet API on localkube: the controllers' logs are files under .localkube/kubelet/logs.
	for dir in "$LK"/kubelet/logs/"${OPERATOR_NS}"_"${RELEASE}"-*; do
		[[ -d $dir ]] || continue
		for log in "$dir"/*/*.log; do
			printf -- '--- %s (last 20 lines)\n' "${log#"$LK"/}"
			tail -n 20 "$log"
			echo
		done
	done
	exit 1
}

step "helm upgrade --install $RELEASE (namespace $OPERATOR_NS, watching $NS)"
k create namespace "$NS" --dry-run=client -o yaml | k apply -f - >/dev/null
"$HELM" upgrade --install "$RELEASE" "$ROOT/charts/valkey-operator" \
	--namespace "$OPERATOR_NS" --create-namespace \
	--set "nodeController.watchNamespaces={$NS}" \
	--set "clusterController.watchNamespaces={$NS}" \
	--wait --timeout 180s >/dev/null || {
	k get pods -n "$OPERATOR_NS" -o wide
	k describe pods -n "$OPERATOR_NS"
	exit 1
}
k get deployments -n "$OPERATOR_NS"

step "kubectl apply -n $NS -f examples/valkeycluster.yaml"
k apply -n "$NS" -f "$ROOT/examples/valkeycluster.yaml"

step "waiting for $CLUSTER to be Ready (deadline ${TIMEOUT}s)"
shards=$(k get valkeycluster "$CLUSTER" -n "$NS" -o jsonpath='{.spec.shards}')
replicas=$(k get valkeycluster "$CLUSTER" -n "$NS" -o jsonpath='{.spec.replicas}')
deadline=$(($(date +%s) + TIMEOUT))
# Ready, and every node ready with the role it has in Valkey: shards primaries, the rest replicas
# (the node-controller re-reads roles every few seconds, so READY can come a moment earlier).
until
	state=$(k get valkeycluster "$CLUSTER" -n "$NS" -o jsonpath='{.status.state}' 2>/dev/null || true)
	roles=$(k get valkeynode -n "$NS" -l "valkey.io/cluster=$CLUSTER" \
		-o jsonpath='{range .items[*]}{.status.ready}/{.status.role}{"\n"}{end}' 2>/dev/null || true)
	[[ $state == Ready ]] &&
		[[ $(grep -c '^true/primary$' <<<"$roles") -eq $shards ]] &&
		[[ $(grep -c '^true/replica$' <<<"$roles") -eq $((shards * replicas)) ]]
do
	(($(date +%s) < deadline)) || diagnose
	sleep 2
done

step "kubectl get valkeycluster -n $NS -o wide"
k get valkeycluster -n "$NS" -o wide
step "kubectl get valkeynode -n $NS"
k get valkeynode -n "$NS"

ip=$(k get valkeynode "$CLUSTER-0-0" -n "$NS" -o jsonpath='{.status.podIP}')
secret=$(k get valkeycluster "$CLUSTER" -n "$NS" -o jsonpath='{.status.passwordSecretName}')
password=$(k get secret "$secret" -n "$NS" -o jsonpath='{.data.password}' | base64 -d)
step "a client: SET and GET through the cluster"
REDISCLI_AUTH=$password "$VALKEY_CLI" -c -h "$ip" set demo:greeting "hello from $CLUSTER"
REDISCLI_AUTH=$password "$VALKEY_CLI" -c -h "$ip" get demo:greeting

cat <<EOF

==> Ready in $(($(date +%s) - started)) s (after the build). Connect a client yourself:

  export KUBECONFIG=$KUBECONFIG
  PASSWORD=\$($KUBECTL get secret $secret -n $NS -o jsonpath='{.data.password}' | base64 -d)
  IP=\$($KUBECTL get valkeynode $CLUSTER-0-0 -n $NS -o jsonpath='{.status.podIP}')   # any node's pod IP
  REDISCLI_AUTH=\$PASSWORD $VALKEY_CLI -c -h \$IP

Pod IPs (10.213.x.y) are reachable from this machine; -c follows the cluster's MOVED redirections.

Back the cluster up into localkube's object store (its Secret localkube-objectstore is in $NS):

  $KUBECTL apply -n $NS -f $ROOT/examples/backup.yaml
  $KUBECTL get valkeybackup -n $NS -w      # PHASE Pending, Running, then Completed with its SIZE
The controllers log to files under $LK/kubelet/logs/ (localkube has no kubectl logs).

Stop everything:  make localkube-down      (the cluster's state is kept; make localkube-reset wipes it)
EOF
