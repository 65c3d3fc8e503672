# Two commands: `make demo` builds from a fresh machine and plans Llama-2-13B on 64 H100s;
# `make test` builds and runs every test. Both install the Debian packages they need.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: demo test build deps bench clean

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

clean:
	rm -rf $(BUILD)
