# The S3-compatible object store of the backup tests and the demo (README.md beside this file).
# Included by the root Makefile.

OBJECTSTORE_SRC := $(ROOT)/tests/objectstore

.PHONY: objectstore
## versitygw, built once per version into .localkube/objectstore/bin.
objectstore:
	@bash $(OBJECTSTORE_SRC)/build.sh >/dev/null
