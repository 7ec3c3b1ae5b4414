# The two commands a new user runs are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
.DEFAULT_GOAL := help

CARGO ?= cargo
ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST))))

# The local control plane (build, start, stop) lives with its own README.
include tests/localkube/localkube.mk

.PHONY: help
help:
	@echo "make demo             local control plane, both controllers, a sample cluster that becomes Ready"
	@echo "make test             every check and test (what CI runs)"
	@echo "make generate         regenerate CRDs and docs from schema/"
	@echo "make check-generated  fail when generated files are stale"
	@echo "make localkube        start the local control plane;  make localkube-down stops it"
