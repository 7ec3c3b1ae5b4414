# The real node (see README.md beside this file): a kubelet, containerd and runc, CNI plugins and
# a registry, each built once from its Go module and kept, and the images it runs. Included by
# tests/localkube/localkube.mk. `LOCALKUBE_REAL_NODE=1 make localkube` starts the cluster with it
# (make test does).

REALNODE_SRC := $(LOCALKUBE_SRC)/realnode
REALNODE_DIR := $(LOCALKUBE_DIR)/realnode
REALNODE_BIN := $(REALNODE_DIR)/bin
REALNODE_CNI := $(REALNODE_DIR)/cni
REALNODE_BUILD := $(LOCALKUBE_DIR)/build/realnode
REALNODE_OCI := $(LOCALKUBE_DIR)/oci

# The kubelet's version is the control plane's (realnode/go.mod); these are the newest the Go
# module proxy serves. README.md says why each.
CONTAINERD_VERSION := v2.4.2
RUNC_VERSION := v1.5.3
CNI_PLUGINS_VERSION := v1.10.0
REGISTRY_VERSION := v3.1.2
CRANE_VERSION := v0.22.1

# Read by "localkube start" (it adds the real node) and by the tests (a real node that is not
# there is then a failure, not a skip); exported so that recipes and sub-makes see it.
LOCALKUBE_REAL_NODE ?=
export LOCALKUBE_REAL_NODE

REALNODE_STAMPS := $(REALNODE_BIN)/.containerd-$(CONTAINERD_VERSION) $(REALNODE_BIN)/.runc-$(RUNC_VERSION) \
	$(REALNODE_CNI)/.plugins-$(CNI_PLUGINS_VERSION) $(REALNODE_BIN)/.registry-$(REGISTRY_VERSION) \
	$(REALNODE_BIN)/.crane-$(CRANE_VERSION)
REALNODE_PROGRAMS := $(REALNODE_BUILD)/bin/pause $(REALNODE_BUILD)/bin/valkey-entrypoint
# go install builds each tool from its own module's go.mod (as its release is built), so their
# dependencies never meet localkube's.
REALNODE_GO_INSTALL = GOFLAGS=-buildvcs=false $(GO) install -trimpath

.PHONY: realnode-prereqs realnode-tools realnode-images realnode-check

## The real node's programs; each step is skipped when it is up to date.
realnode-tools: realnode-prereqs $(REALNODE_BIN)/kubelet $(REALNODE_STAMPS) $(REALNODE_PROGRAMS)

realnode-prereqs:
	@bash $(REALNODE_SRC)/prereqs.sh

# The kubelet at the control plane's version, with the same version variables as localkube.
$(REALNODE_BIN)/kubelet: $(REALNODE_SRC)/go.mod $(REALNODE_SRC)/go.sum
	@mkdir -p $(dir $@)
	cd $(REALNODE_SRC) && $(LOCALKUBE_GO_ENV) $(GO) build -trimpath -ldflags '$(LOCALKUBE_LDFLAGS)' -o $@.tmp k8s.io/kubernetes/cmd/kubelet
	mv $@.tmp $@
	$@ --version

# A stamp names the version, so changing it rebuilds that tool and nothing else does.
$(REALNODE_BIN)/.containerd-$(CONTAINERD_VERSION):
	@mkdir -p $(dir $@)
	GOBIN=$(REALNODE_BIN) CGO_ENABLED=0 $(REALNODE_GO_INSTALL) \
		-ldflags '-s -w -X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD_VERSION)' \
		$(foreach c,containerd containerd-shim-runc-v2 ctr,github.com/containerd/containerd/v2/cmd/$(c)@$(CONTAINERD_VERSION))
	$(REALNODE_BIN)/containerd --version
	rm -f $(REALNODE_BIN)/.containerd-* && touch $@

# runc needs cgo for seccomp (libseccomp, Debian's); its version as its Makefile sets it.
$(REALNODE_BIN)/.runc-$(RUNC_VERSION):
	@mkdir -p $(dir $@)
	GOBIN=$(REALNODE_BIN) CGO_ENABLED=1 $(REALNODE_GO_INSTALL) -tags seccomp \
		-ldflags '-s -w -X main.version=$(RUNC_VERSION:v%=%)' github.com/opencontainers/runc@$(RUNC_VERSION)
	$(REALNODE_BIN)/runc --version
	rm -f $(REALNODE_BIN)/.runc-* && touch $@

$(REALNODE_CNI)/.plugins-$(CNI_PLUGINS_VERSION):
	@mkdir -p $(dir $@)
	GOBIN=$(REALNODE_CNI) CGO_ENABLED=0 $(REALNODE_GO_INSTALL) -ldflags '-s -w' \
		$(foreach p,main/bridge main/loopback ipam/host-local,github.com/containernetworking/plugins/plugins/$(p)@$(CNI_PLUGINS_VERSION))
	rm -f $(REALNODE_CNI)/.plugins-* && touch $@

$(REALNODE_BIN)/.registry-$(REGISTRY_VERSION):
	@mkdir -p $(dir $@)
	GOBIN=$(REALNODE_BIN) CGO_ENABLED=0 $(REALNODE_GO_INSTALL) \
		-ldflags '-s -w -X github.com/distribution/distribution/v3/version.version=$(REGISTRY_VERSION)' \
		github.com/distribution/distribution/v3/cmd/registry@$(REGISTRY_VERSION)
	rm -f $(REALNODE_BIN)/.registry-* && touch $@

$(REALNODE_BIN)/.crane-$(CRANE_VERSION):
	@mkdir -p $(dir $@)
	GOBIN=$(REALNODE_BIN) CGO_ENABLED=0 $(REALNODE_GO_INSTALL) -ldflags '-s -w' \
		github.com/google/go-containerregistry/cmd/crane@$(CRANE_VERSION)
	rm -f $(REALNODE_BIN)/.crane-* && touch $@

# The two programs of the images built here (standard library only).
$(REALNODE_BUILD)/bin/%: $(REALNODE_SRC)/cmd/%/main.go
	@mkdir -p $(dir $@)
	cd $(REALNODE_SRC) && $(LOCALKUBE_GO_ENV) $(GO) build -trimpath -ldflags '-s -w' -o $@ ./cmd/$*

## The real node's images as OCI archives in .localkube/oci (oci.sh: each is built again only when
## its inputs changed); localkube pushes them into its registry when the real node starts.
realnode-images: realnode-prereqs localkube-valkey-images $(REALNODE_PROGRAMS)
	bash $(REALNODE_SRC)/oci.sh localkube $(REALNODE_OCI)

# With the real node asked for, the cluster needs its programs and images first.
ifeq ($(LOCALKUBE_REAL_NODE),1)
localkube: realnode-tools realnode-images
endif

realnode-check:
	@out=$$(cd $(REALNODE_SRC) && gofmt -l cmd); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	cd $(REALNODE_SRC) && $(LOCALKUBE_GO_ENV) $(GO) vet -trimpath ./cmd/...
	cd $(REALNODE_SRC) && $(LOCALKUBE_GO_ENV) $(GO) test -vet=off -trimpath ./cmd/...
localkube-check: realnode-check
