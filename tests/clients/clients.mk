# The client libraries applications use, for the tests that must show those clients work (an
# outside client through the external addresses, Sentinel pools): valkey-py from PyPI, installed
# once per version into .localkube/python (no virtualenv: `pip install --target`, run with
# PYTHONPATH, so python3-venv is not needed).
VALKEY_PY_VERSION ?= 6.2.0
CLIENTS_PYTHON_DIR := $(LOCALKUBE_DIR)/python
CLIENTS_PYTHON_STAMP := $(CLIENTS_PYTHON_DIR)/.valkey-$(VALKEY_PY_VERSION)

.PHONY: clients
## valkey-py, for tests/clients/*.py.
clients: $(CLIENTS_PYTHON_STAMP)
$(CLIENTS_PYTHON_STAMP):
	@rm -rf $(CLIENTS_PYTHON_DIR) && mkdir -p $(CLIENTS_PYTHON_DIR)
	python3 -m pip install -q --disable-pip-version-check --no-warn-script-location --root-user-action=ignore \
		--target $(CLIENTS_PYTHON_DIR) valkey==$(VALKEY_PY_VERSION)
	touch $@
