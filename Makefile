# Two commands: `make demo` builds from a fresh machine and plans Llama-2-13B on 64 H100s;
# `make test` builds and runs every test. Both install the Debian packages they need.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: demo test test-timing build deps bench validate calibrate-public fuzz fuzz-plans sanitize clean gpu-build gpu-check
FUZZ_SECONDS ?= 60
FUZZ_RUNS ?=

deps:
	@tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The demo builds only the five tools it runs (no tests, benchmarks or GPU tests).
DEMO_TARGETS = planner simulate train compare calibrate
demo: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target $(DEMO_TARGETS)
	$(BUILD)/bin/planner --model models/13b.json --gpus 64
	@tools/demo-loop.sh $(BUILD)

# Tests labelled `timing` assert wall-clock bounds a busy machine can miss: `make test-timing` runs them.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE timing

test-timing: build
	cd $(BUILD) && ctest --output-on-failure -L timing

# The randomized differential test of the CPU runtime over the plan space (tools/fuzz_plans.py)
# with another seed: `make fuzz-plans SEED=7 PLANS=300`.
SEED ?= 1
PLANS ?= 200
fuzz-plans: build
	/usr/bin/python3 tools/fuzz_plans.py $(BUILD)/bin --seed $(SEED) --plans $(PLANS)

bench: build
	$(BUILD)/bin/planner_bench
	$(BUILD)/bin/simulator_bench

# The published training runs (bench/validation), predicted and compared row by row with the
# bundled calibration, then the calibration judged: per source uncalibrated, calibrated in-sample,
# and calibrated with that source left out of the fit (the figure that counts) — the table
# bench/validation/README.md shows. `make validate PIN=1` re-pins the errors the
# Validation.PublishedRuns test holds. VALIDATION_RUNS: one or more run files (a run in two is
# priced once).
VALIDATION_RUNS ?= bench/validation/published-runs.json bench/validation/more-published-runs.json
validate: build
	/usr/bin/python3 bench/validation/published_runs.py $(BUILD)/bin/simulate $(VALIDATION_RUNS) $(BUILD)/validation.json \
	  --table $(BUILD)/validation.md --runs-out $(BUILD)/validation-runs.json \
	  $(if $(PIN),--pin bench/validation/expected-errors.json)
	$(BUILD)/bin/calibrate --runs $(BUILD)/validation-runs.json --cross-validate --name public-runs \
	  --out $(BUILD)/public-runs.json --table $(BUILD)/calibration.md

# Refits the bundled calibration (calibrations/public-runs.json) to the published runs, with its
# leave-one-source-out bands and per-run tables; then `make validate PIN=1` re-pins.
calibrate-public: build
	/usr/bin/python3 bench/validation/published_runs.py $(BUILD)/bin/simulate $(VALIDATION_RUNS) $(BUILD)/validation.json \
	  --runs-out $(BUILD)/validation-runs.json >/dev/null
	$(BUILD)/bin/calibrate --runs $(BUILD)/validation-runs.json --cross-validate --name public-runs \
	  --out calibrations/public-runs.json --table bench/results/calibration-public-runs.md

# libFuzzer targets for the model, cluster, plan, trace, calibration and measured-runs readers,
# FUZZ_SECONDS each.
fuzz:
	@tools/install-deps.sh --fuzz
	@cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_CXX_COMPILER=clang++ -DPARALLAX_FUZZ=ON -DPARALLAX_CUDA=OFF -DPARALLAX_BUILD_TESTS=OFF -DPARALLAX_BUILD_BENCH=OFF >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target model_fuzz cluster_fuzz plan_fuzz trace_fuzz calibration_fuzz runs_fuzz
	FUZZ_RUNS=$(FUZZ_RUNS) tools/run-fuzz.sh build-fuzz $(FUZZ_SECONDS)

# The whole test suite under AddressSanitizer and UndefinedBehaviorSanitizer (less the timing
# loop, which measures speed the sanitizers change).
sanitize: deps
	@cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPARALLAX_SANITIZE=ON -DPARALLAX_CUDA=OFF -DPARALLAX_BUILD_BENCH=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -j $(JOBS) -LE timing

# The binaries tools/gpu_check.sh carries to a GPU machine that has neither MPI nor our
# libraries: sm_90 only, no MPI, static cudart; libbenchmark travels in build-gpu/lib, and this
# machine's libstdc++ and libgcc_s in build-gpu/lib/cxx for a machine whose own are older (cuBLAS
# and NCCL come from the machine's PyTorch packages).
GPU_TARGETS = train simulate compare calibrate cuda_kernels_test cuda_runtime_test gpu_kernels_bench
gpu-build: deps
	@cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPARALLAX_MPI=OFF -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
	@cmake --build build-gpu -j $(JOBS) --target $(GPU_TARGETS)
	@mkdir -p build-gpu/lib/cxx && for l in libbenchmark.so.1debian libstdc++.so.6 libgcc_s.so.1; do \
	  cp -L $$(ldconfig -p | awk -v l=$$l '$$1 == l {print $$NF; exit}') build-gpu/lib/; done
	@mv build-gpu/lib/libstdc++.so.6 build-gpu/lib/libgcc_s.so.1 build-gpu/lib/cxx/
	@strip build-gpu/bin/* build-gpu/tests/cuda_*_test

# The whole GPU check on this machine (without a GPU it is the dry run: the GPU steps skip or fail
# cleanly and the script's plumbing is exercised).
gpu-check: gpu-build
	tools/gpu_check.sh

clean:
	rm -rf $(BUILD) build-fuzz build-asan build-gpu
