# Two commands: `make demo` builds from a fresh machine and plans Llama-2-13B on 64 H100s;
# `make test` builds and runs every test. Both install the Debian packages they need.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: demo test build deps bench fuzz sanitize clean
FUZZ_SECONDS ?= 60
FUZZ_RUNS ?=

deps:
	@tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	$(BUILD)/bin/planner --model models/13b.json --gpus 64
	@tools/demo-loop.sh $(BUILD)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: build
	$(BUILD)/bin/planner_bench
	$(BUILD)/bin/simulator_bench

# libFuzzer targets for the model, cluster, plan and trace readers, FUZZ_SECONDS each.
fuzz:
	@tools/install-deps.sh --fuzz
	@cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_CXX_COMPILER=clang++ -DPARALLAX_FUZZ=ON -DPARALLAX_BUILD_TESTS=OFF -DPARALLAX_BUILD_BENCH=OFF >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target model_fuzz cluster_fuzz plan_fuzz trace_fuzz
	FUZZ_RUNS=$(FUZZ_RUNS) tools/run-fuzz.sh build-fuzz $(FUZZ_SECONDS)

# The whole test suite under AddressSanitizer and UndefinedBehaviorSanitizer (less the timing
# loop, which measures speed the sanitizers change).
sanitize: deps
	@cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPARALLAX_SANITIZE=ON -DPARALLAX_BUILD_BENCH=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j $(JOBS) -LE timing

clean:
	rm -rf $(BUILD) build-fuzz build-asan
