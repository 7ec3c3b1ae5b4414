# The two commands a new user runs are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
.DEFAULT_GOAL := help

CARGO ?= cargo
# Every cargo command selects the whole workspace (with a target filter where it runs one test
# target): cargo resolves dependency features for the packages it selects, so `-p one-crate`
# resolves them for that crate alone and recompiles every dependency whose features differ (serde
# alone drags in almost everything), several times over in one `make test`.
CARGO_TEST := $(CARGO) test --workspace
ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))
# End-to-end tests run as one pool: each in its own namespace with its own controller processes,
# light tests on E2E_THREADS threads, heavy ones (a Valkey cluster, a chart install) at most
# E2E_HEAVY at once (default: one per core plus one; see tests/e2e/src/pool.rs).
E2E_THREADS ?= 10
E2E_HEAVY ?= $(shell echo $$(( $$(nproc) + 1 )))

# The local control plane (build, start, stop) lives with its own README.
include tests/localkube/localkube.mk
include hack/demo.mk
include tests/objectstore/objectstore.mk
include tests/clients/clients.mk

.PHONY: help
help:
	@echo "make demo             local control plane, both controllers, a sample cluster that becomes Ready"
	@echo "make test             every check and test (what CI runs)"
	@echo "make generate         regenerate CRDs and docs from valkey-api/schema/"
	@echo "make check-generated  fail when generated files are stale"
	@echo "make lint             cargo fmt --check, clippy -D warnings, no import circles (lint-dockerfiles: hadolint)"
	@echo "make bench            benchmarks: speed and memory figures"
	@echo "make bench-engine     the engine's pass over clusters of up to 990 members (no cluster needed)"
	@echo "make bench-charts     draw the benchmarks' charts (docs/charts/) again from bench/results/"
	@echo "make chaos            every operation crossed with every fault, with writers (hours; CHAOS_SEED, CHAOS_FILTER)"
	@echo "make images           OCI archives of both controllers' images in target/images (no Docker needed)"
	@echo "make test-images      the same archives from the debug build, for make test (no release build)"
	@echo "make localkube        start the local control plane;  make localkube-down stops it"

## ---- build and generated files ----------------------------------------------------------------

.PHONY: build generate check-generated lint previous-release
build:
	$(CARGO) build --workspace --bins

# The previous release's chart and controllers (hack/previous-release.env), for the upgrade test.
# It leaves that release's binaries in target/debug: `build` must run after it.
previous-release: localkube-prereqs
	bash $(ROOT)/hack/previous-release.sh

# The CRDs are crd() of the compiled API types; the reference comes from the same schema.
GENERATE := $(ROOT)/target/debug/valkey-api-generate
generate:
	$(CARGO) build -q --workspace --bin valkey-api-generate
	$(GENERATE) write

check-generated:
	$(CARGO) build -q --workspace --bin valkey-api-generate
	$(GENERATE) check

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	python3 $(ROOT)/hack/import-circles.py

## ---- tests ------------------------------------------------------------------------------------

.PHONY: test unit e2e
# Everything the issues ask to be tested. With KUBECONFIG set, the end-to-end tests run on that
# cluster; without it they start the local control plane with its real node (kubelet, containerd,
# registry: tests/localkube/realnode) and stop it (checking nothing is left). The controllers'
# images are built first: the supervisor pushes them to the real node's registry when it starts,
# and the chart's test there installs them. They are make test-images, the debug build of the same
# sources (`build`) on a glibc base, so make test does not build every dependency a second time
# in release with crt-static; make images builds those static release images for users.
test: check-generated lint lint-dockerfiles localkube-check localkube-tools previous-release build unit
ifeq ($(strip $(KUBECONFIG)),)
	$(MAKE) test-images
	$(MAKE) LOCALKUBE_REAL_NODE=1 localkube localkube-images
	KUBECONFIG=$(LOCALKUBE_KUBECONFIG) LOCALKUBE_REAL_NODE=1 $(MAKE) e2e; status=$$?; $(MAKE) localkube-down && exit $$status
else
	$(MAKE) localkube-images
	$(MAKE) e2e
endif

# Unit and component tests: no cluster needed (the cluster-controller's engine tests run real
# valkey-server processes from the localkube image table; the backup crate's tests also run the
# object store process; the chart's static checks run helm).
# localkube's own tests (tests/localkube/suite) need the cluster: they run with e2e.
unit: $(HELM) objectstore
	$(CARGO_TEST) --exclude e2e --exclude localkube-suite --no-fail-fast
	# The e2e crate's own unit tests need no cluster: benchmark charts and reports, chaos results.
	$(CARGO_TEST) --lib -- bench:: chaos:: fleet:: formation:: resharding:: side_by_side::
	$(CARGO_TEST) --test chart_static

# Every end-to-end test runs, whatever fails first; the exit status says whether any failed.
# The chaos scenarios come last, one at a time: their faults (a zone, a node, the API server)
# would disturb tests running beside them.
e2e:
	@status=0; rm -f target/e2e-heavy-times.tsv; \
	E2E_HEAVY=$(E2E_HEAVY) $(CARGO_TEST) --no-fail-fast --test suite -- --test-threads=$(E2E_THREADS) || status=1; \
	echo "# The heavy tests that held their turn longest (seconds):"; \
	sort -rn target/e2e-heavy-times.tsv 2>/dev/null | head -20; \
	$(MAKE) localkube-test || status=1; \
	echo "# Leader election and server-side apply against the real API server."; \
	$(CARGO_TEST) --test leader_election --test api_helpers -- --ignored --test-threads=1 || status=1; \
	echo "# Chaos: the fixed-seed scenarios (make chaos runs the whole matrix)."; \
	$(CARGO_TEST) --test chaos -- --test-threads=1 || status=1; \
	exit $$status

## ---- benchmarks -------------------------------------------------------------------------------

.PHONY: chaos
# Every operation crossed with every fault (tests/e2e/tests/chaos.rs), on KUBECONFIG's localkube or a
# local one; prints a table, writes it under target/chaos/, and keeps each scenario's row in
# docs/chaos.json and docs/chaos.md as it finishes. CHAOS_FILTER=idle.,roll.,-on-8.0 runs a part of it;
# CHAOS_SEED repeats a run.
chaos: localkube-tools build
ifeq ($(strip $(KUBECONFIG)),)
	$(MAKE) localkube localkube-images
	KUBECONFIG=$(LOCALKUBE_KUBECONFIG) $(CARGO_TEST) --test chaos -- --ignored full_matrix --nocapture
else
	$(CARGO_TEST) --test chaos -- --ignored full_matrix --nocapture
endif

.PHONY: bench bench-engine bench-charts
# Speed and memory figures (bench/README.md; each writes bench/results/ and its section of
# docs/benchmarks.md): the engine's pass at scale (bench-engine), time to form a cluster, to scale
# it out with keys (Valkey 9 and 8 migration paths), resharding side by side with valkey-cli and
# the limit, failover with a writer, a fleet of hundreds of ValkeyNodes at rest (FLEET_* sizes),
# backup and restore beside valkey-cli --rdb and valkey-server loading the snapshots
# (BENCH_BACKUP_KEYS, default 1,000,000; BENCH_BACKUP_VALUE_BYTES, BENCH_BACKUP_SHARDS).
# On KUBECONFIG, else on localkube. The controllers measured are the release build, as they ship
# (OPERATOR_BIN_DIR picks other binaries): the debug build's passes are slower, and the ratios
# against the direct references would charge that to the design (Valkey 8's 4 → 3: 3.7 s debug,
# 3.5 s release, one run each).
BENCH_BIN_DIR := $(or $(OPERATOR_BIN_DIR),$(or $(CARGO_TARGET_DIR),$(ROOT)/target)/release)
bench: localkube-tools build
	$(if $(OPERATOR_BIN_DIR),,$(CARGO) build --release --workspace --bin node-controller --bin cluster-controller)
	$(MAKE) bench-engine
ifeq ($(strip $(KUBECONFIG)),)
	$(MAKE) localkube
	KUBECONFIG=$(LOCALKUBE_KUBECONFIG) OPERATOR_BIN_DIR=$(BENCH_BIN_DIR) $(CARGO_TEST) --test bench -- --ignored --nocapture --test-threads=1
else
	OPERATOR_BIN_DIR=$(BENCH_BIN_DIR) $(CARGO_TEST) --test bench -- --ignored --nocapture --test-threads=1
endif

# One observe and decide pass of the engine over a healthy cluster of 30, 300 and 990 members (the
# schema's maximum), with servers answering from memory: peak heap and CPU time, in a release
# build. Writes bench/results/engine-scale.json; bench/README.md explains the figures.
bench-engine:
	$(CARGO_TEST) --release --test pass_scale -- --ignored --nocapture
	$(MAKE) bench-charts

# Every benchmark's charts, drawn again from the committed figures in bench/results/ (no
# benchmark runs): the benchmarks in tests/e2e draw theirs when they publish, this draws
# engine-scale's (its test is in another crate) and all of them after a change to the charts.
BENCH_CHARTS := $(or $(CARGO_TARGET_DIR),$(ROOT)/target)/debug/bench-charts
bench-charts:
	$(CARGO) build -q --workspace --bin bench-charts
	$(BENCH_CHARTS)
