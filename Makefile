# Convenience front end over CMake: `make demo` and `make test` do all the set-up.
BUILD    ?= build
JOBS     ?= $(shell nproc)
# ON builds the CUDA kernels when nvcc is present (slow on small machines); OFF skips them.
FA_CUDA  ?= ON
CMAKE_FLAGS ?=
PYTHON   ?= python3
GENERATOR := $(if $(shell command -v ninja),-G Ninja,)

.PHONY: all build demo test test-cpp test-python deps asan clean

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(GENERATOR) -DCMAKE_BUILD_TYPE=Release -DFA_CUDA=$(FA_CUDA) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The main job: forward + backward, naive against FlashAttention, on the best device present.
demo: build
	$(BUILD)/tools/flashattn demo

# Python packages the tests need (see README: Dependencies).
deps:
	$(PYTHON) -c "import torch, numpy, pytest" 2>/dev/null || $(PYTHON) -m pip install -r requirements-test.txt

test-cpp: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

test-python: build deps
	FLASHATTN_LIBRARY=$(abspath $(BUILD))/src/libflashattn.so PYTHONPATH=python $(PYTHON) -m pytest -q python/tests

# Every test: the GoogleTest suite under ctest, then the pytest suite.
test: test-cpp test-python

# The GoogleTest suite under AddressSanitizer and UndefinedBehaviorSanitizer.
asan:
	$(MAKE) test-cpp BUILD=build-asan FA_CUDA=OFF CMAKE_FLAGS="-DFA_SANITIZE=ON -DFA_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo"

clean:
	rm -rf $(BUILD) build-asan
