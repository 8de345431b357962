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

# FA_CUDA given on make's command line also reaches a build folder configured before.
build: $(BUILD)/CMakeCache.txt
	$(if $(filter command line,$(origin FA_CUDA)),cmake -S . -B $(BUILD) -DFA_CUDA=$(FA_CUDA) >/dev/null)
	cmake --build $(BUILD) -j $(JOBS)

# The main job: forward + backward, naive against FlashAttention, on the best device present.
demo: build
	$(BUILD)/tools/flashattn demo

# What the tests need (see README: Dependencies): GoogleTest from the system's packages (as
# root with apt-get; otherwise install it yourself), the Python packages with pip.
deps:
	@dpkg -s libgtest-dev >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && apt-get install -y -qq libgtest-dev; } || \
	  echo "GoogleTest is missing (apt-get install libgtest-dev): the C++ suite will be skipped"
	$(PYTHON) -c "import torch, numpy, pytest, transformers" 2>/dev/null || $(PYTHON) -m pip install -r requirements-test.txt

test-cpp: deps build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

test-python: deps build
	FLASHATTN_LIBRARY=$(abspath $(BUILD))/src/libflashattn.so PYTHONPATH=python $(PYTHON) -m pytest -q python/tests

# Every test: the GoogleTest suite under ctest, then the pytest suite.
test: test-cpp test-python

# The GoogleTest suite under AddressSanitizer and UndefinedBehaviorSanitizer.
asan:
	$(MAKE) test-cpp BUILD=build-asan FA_CUDA=OFF CMAKE_FLAGS="-DFA_SANITIZE=ON -DFA_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo"

clean:
	rm -rf $(BUILD) build-asan
