# Front door. `make test` sets up, builds and runs every test; `make chat` runs the main job.
SHELL := /bin/bash
JOBS ?= $(shell nproc)
BUILD_DIR ?= build
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 300
MODEL ?=

.PHONY: all setup build test test-reference test-asan fuzz fuzz-smoke chat serve format clean

all: build

setup:
	@scripts/setup.sh

# Release build; the binary ends up at build/tachyon.
build:
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# The main job: an interactive chat with the default model (MODEL=path for another).
chat: setup build
	@$(BUILD_DIR)/tachyon chat $(if $(MODEL),-m $(MODEL))

# The server: OpenAI-compatible API on 127.0.0.1:8080 with the default model (MODEL=path for
# another, PORT=N for another port). Once ready it prints a curl line and an openai snippet;
# Ctrl-C drains running requests and stops it.
PORT ?= 8080
serve: setup build
	@exec $(BUILD_DIR)/tachyon serve --port $(PORT) $(if $(MODEL),-m $(MODEL))

# Every test but those labelled slow (the long runs against llama.cpp, the 20K-token streaming
# perplexity), which `make test-reference` runs. On a 2-vCPU AVX2 machine (Zen 3) the rest took
# 612-662 s of ctest in the last four measurements (1,450 before the slowest were shortened), then
# ~80 s of fuzz smoke (10 targets x 15 s, JOBS at once); the target is 600 in all (issue 21).
test: setup build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -LE slow
	@$(MAKE) --no-print-directory fuzz-smoke

test-reference: setup build
	@cd $(BUILD_DIR) && ctest --output-on-failure -L slow

# The same suite built with AddressSanitizer and UndefinedBehaviorSanitizer. Tests labelled
# slow (the 32k-token perplexity run against llama.cpp) are left out: they exercise the same
# code as the quick ones, ten times slower under the sanitizers.
test-asan: setup
	@$(MAKE) --no-print-directory build BUILD_DIR=build-asan \
	  CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DTACHYON_SANITIZE=ON"
	@cd build-asan && ctest --output-on-failure -j $(JOBS) -LE slow

# libFuzzer targets need clang; each runs FUZZ_SECONDS (make fuzz FUZZ_SECONDS=3600).
build-fuzz/.configured:
	@CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DTACHYON_FUZZ=ON >/dev/null && touch $@

fuzz: setup build-fuzz/.configured
	@cmake --build build-fuzz -j $(JOBS)
	@scripts/run_fuzzers.sh build-fuzz $(FUZZ_SECONDS) $(JOBS)

fuzz-smoke: build-fuzz/.configured
	@cmake --build build-fuzz -j $(JOBS)
	@scripts/run_fuzzers.sh build-fuzz 15 $(JOBS)

format:
	@git ls-files '*.h' '*.cpp' | xargs clang-format -i

clean:
	@rm -rf build build-asan build-fuzz
