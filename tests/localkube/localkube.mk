# The local control plane: build its tools, start it, stop it. Included by the root Makefile;
# see tests/localkube/README.md.

LOCALKUBE_SRC := $(ROOT)/tests/localkube
LOCALKUBE_DIR := $(ROOT)/.localkube
# Every localkube command of this checkout uses this checkout's directory, also when .localkube is
# a symlink to another checkout's: the binary would otherwise find its directory from its own
# resolved path, and serve that other checkout's images (target/images) to the real node.
export LOCALKUBE_DIR
LOCALKUBE_BIN := $(LOCALKUBE_DIR)/bin/localkube
# CoreDNS, from its Go module in the same go.mod (versions shared with the control plane), a binary
# of its own: see cmd/coredns/main.go.
LOCALKUBE_COREDNS := $(LOCALKUBE_DIR)/bin/coredns
KUBECTL := $(LOCALKUBE_DIR)/bin/kubectl
HELM := $(LOCALKUBE_DIR)/bin/helm
LOCALKUBE_KUBECONFIG := $(LOCALKUBE_DIR)/kubeconfig
LOCALKUBE_KUBELET := $(ROOT)/target/debug/localkube-kubelet

GO ?= go
K8S_VERSION := v1.36.3
# helm v3.21 is built against the Kubernetes 0.36 libraries, like localkube.
HELM_VERSION := v3.21.4

# /version must report the release, not v0.0.0-master: the same variables as upstream's build.
LOCALKUBE_VERSION_VARS := gitVersion=$(K8S_VERSION) gitMajor=1 gitMinor=36 gitTreeState=clean buildDate=1970-01-01T00:00:00Z
LOCALKUBE_LDFLAGS := -s -w $(foreach p,k8s.io/component-base/version k8s.io/client-go/pkg/version,$(foreach v,$(LOCALKUBE_VERSION_VARS),-X $(p).$(v)))
# As helm's own release build: its version, and the Kubernetes version of its client libraries
# (what "helm template" and "helm lint" assume without a cluster).
HELM_LDFLAGS := -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	$(foreach p,pkg/lint/rules pkg/chartutil,-X helm.sh/helm/v3/$(p).k8sVersionMajor=1 -X helm.sh/helm/v3/$(p).k8sVersionMinor=36)
LOCALKUBE_GO_SOURCES := $(LOCALKUBE_SRC)/go.mod $(LOCALKUBE_SRC)/go.sum \
	$(shell find $(LOCALKUBE_SRC)/cmd/localkube $(LOCALKUBE_SRC)/internal -name '*.go' 2>/dev/null)
# Static, reproducible builds; Go's default caches (GOCACHE, GOMODCACHE) persist between runs.
LOCALKUBE_GO_ENV := CGO_ENABLED=0 GOFLAGS=-buildvcs=false

.PHONY: localkube-check localkube-prereqs localkube-tools localkube-valkey-images localkube-images localkube localkube-down localkube-reset localkube-status localkube-test localkube-scale

## Tools: the localkube binary with its kubectl link, CoreDNS, helm, the valkey images, the object
## store (tests/objectstore). Each step is skipped when it is up to date.
localkube-tools: localkube-prereqs $(LOCALKUBE_BIN) $(KUBECTL) $(LOCALKUBE_COREDNS) $(HELM) localkube-valkey-images objectstore

## Machine tools (iproute2, patchelf, pip from Debian's packages when missing; Go 1.26 checked).
localkube-prereqs:
	@bash $(LOCALKUBE_SRC)/prereqs.sh

$(LOCALKUBE_BIN): $(LOCALKUBE_GO_SOURCES)
	@mkdir -p $(dir $@)
	cd $(LOCALKUBE_SRC) && $(LOCALKUBE_GO_ENV) $(GO) build -trimpath -ldflags '$(LOCALKUBE_LDFLAGS)' -o $@.tmp ./cmd/localkube
	mv $@.tmp $@

$(LOCALKUBE_COREDNS): $(LOCALKUBE_SRC)/go.mod $(LOCALKUBE_SRC)/go.sum $(LOCALKUBE_SRC)/cmd/coredns/main.go
	@mkdir -p $(dir $@)
	cd $(LOCALKUBE_SRC) && $(LOCALKUBE_GO_ENV) $(GO) build -trimpath -ldflags '-s -w' -o $@.tmp ./cmd/coredns
	mv $@.tmp $@

$(KUBECTL): | $(LOCALKUBE_BIN)
	ln -sfn localkube $@

# A stamp names the version, so changing HELM_VERSION rebuilds helm and nothing else does.
$(HELM): $(LOCALKUBE_DIR)/bin/.helm-$(HELM_VERSION)
$(LOCALKUBE_DIR)/bin/.helm-$(HELM_VERSION):
	@mkdir -p $(dir $@)
	GOBIN=$(LOCALKUBE_DIR)/bin $(LOCALKUBE_GO_ENV) $(GO) install -trimpath -ldflags '$(HELM_LDFLAGS)' \
		helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	$(HELM) version --short
	rm -f $(LOCALKUBE_DIR)/bin/.helm-*
	touch $@

localkube-valkey-images:
	bash $(LOCALKUBE_SRC)/images.sh valkey

## The project's controllers as images (copies of the debug binaries).
localkube-images:
	$(CARGO) build --workspace --bins
	bash $(LOCALKUBE_SRC)/images.sh controllers

## Start the cluster (tools, the process kubelet, then "localkube start"); returns when it is ready.
localkube: localkube-tools
	$(CARGO) build --workspace --bins
	$(LOCALKUBE_BIN) start --kubelet $(LOCALKUBE_KUBELET)
	@echo "export KUBECONFIG=$(LOCALKUBE_KUBECONFIG)"

## Stop it and check that nothing is left behind.
localkube-down:
	@if [ -x $(LOCALKUBE_BIN) ]; then $(LOCALKUBE_BIN) stop; fi
	bash $(LOCALKUBE_SRC)/assert-clean.sh

localkube-status:
	$(LOCALKUBE_BIN) status

## Wipe the cluster's state (etcd, PKI, kubelet state, logs); tools and images stay.
localkube-reset: localkube-down
	rm -rf $(LOCALKUBE_DIR)/etcd $(LOCALKUBE_DIR)/pki $(LOCALKUBE_DIR)/kubelet $(LOCALKUBE_DIR)/logs $(LOCALKUBE_DIR)/realnode/state \
		$(LOCALKUBE_DIR)/kubeconfig $(LOCALKUBE_DIR)/localkube.pid $(LOCALKUBE_DIR)/localkube.lock \
		$(LOCALKUBE_DIR)/faults $(LOCALKUBE_DIR)/coredns $(LOCALKUBE_DIR)/objectstore/data

## localkube's own tests, on the running cluster (KUBECONFIG, else this checkout's): what the e2e
## suite relies on, the kubelet conformance list, the pod network, each fault. The API server
## restart goes last and alone: it interrupts every client for a few seconds.
LOCALKUBE_TEST_THREADS ?= 8
localkube-test:
	@status=0; \
	$(CARGO_TEST) --test localkube -- --test-threads=$(LOCALKUBE_TEST_THREADS) || status=1; \
	$(CARGO_TEST) --test localkube -- --ignored --exact faults::a_watch_survives_api_server_restarts || status=1; \
	exit $$status

## Hundreds of pods (LOCALKUBE_SCALE_PODS, default 300): all Ready, reachable, one neighbour entry
## each; prints the time, neighbour entries and memory.
localkube-scale:
	$(CARGO_TEST) --test localkube -- --ignored --exact --nocapture network::hundreds_of_pods_are_ready_and_reach_each_other

## The Go side's own checks: formatting, vet and unit tests (same build flags as the binary, so the
## compiled dependencies come from the cache).
localkube-check:
	@out=$$(cd $(LOCALKUBE_SRC) && gofmt -l cmd internal); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	cd $(LOCALKUBE_SRC) && $(LOCALKUBE_GO_ENV) $(GO) vet -trimpath ./...
	cd $(LOCALKUBE_SRC) && $(LOCALKUBE_GO_ENV) $(GO) test -vet=off -trimpath ./internal/...

# The real node: its programs, images and checks (LOCALKUBE_REAL_NODE=1 asks for it).
include $(LOCALKUBE_SRC)/realnode/realnode.mk
