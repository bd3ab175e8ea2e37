# The two commands: `make` builds everything on a fresh machine, `make test` runs the tests.
# `make AOTK_KERNELS='attn_fwd_bf16_d128*'` builds a subset of the kernel catalog while developing.

BUILD_DIR      ?= build
TRITON_VERSION := 3.6.0
VENV           := $(BUILD_DIR)/venv
PYTHON         ?= python3
AOTK_KERNELS   ?=

.PHONY: all test clean
all: $(VENV)/.triton-$(TRITON_VERSION)
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DAOTK_PYTHON=$(abspath $(VENV))/bin/python -DAOTK_KERNELS="$(AOTK_KERNELS)"
	cmake --build $(BUILD_DIR)
	$(BUILD_DIR)/aotk info

# The build's own Python environment, holding the pinned Triton (the compiler of the kernels only:
# nothing of it is needed at run time).
$(VENV)/.triton-$(TRITON_VERSION):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check triton==$(TRITON_VERSION)
	touch $@

test:
	ctest --test-dir $(BUILD_DIR) --output-on-failure

clean:
	rm -rf $(BUILD_DIR)
