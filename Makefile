# ctrbox build. `make` builds bin/ctrbox and bin/ctrbox-data; `make test`, `make demo`, `make bench`,
# `make fuzz`, `make asan` do what the README says. Objects go to $(BUILD)/ (build-asan/ for asan).

CC      ?= cc
BUILD   ?= build
BIN     ?= bin
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g -fopenmp -std=gnu11 -Wall -Wextra -Wshadow -Wno-unused-parameter -Wno-missing-field-initializers -pthread
SAN     ?=
# SIMD=avx2: no AVX-512 variants of the element-wise kernels (dense/layers.c), to measure on an
# AVX-512 machine what an AVX2-only CPU runs (bench/bench_train.sh ISA=avx2)
SIMD    ?=
DEFS     = $(if $(filter avx2,$(SIMD)),-DCTRBOX_NO_AVX512)
# MPI (src/dist.c): Open MPI from Debian, or MPICH, found by pkg-config
MPI_PC     ?= $(shell pkg-config --exists ompi-c 2>/dev/null && echo ompi-c || echo mpich)
MPI_CFLAGS ?= $(shell pkg-config --cflags $(MPI_PC) 2>/dev/null)
MPI_LIBS   ?= $(shell pkg-config --libs $(MPI_PC) 2>/dev/null)
LDLIBS   = $(MPI_LIBS) -fopenmp -lrocksdb -lstdc++ -linih -lopenblas -luring -lxxhash -lzstd -lz -ljansson -lm -ldl -pthread

# The CUDA backend: a shared object opened at run time (dense/device.c), built whenever nvcc is
# found (or CUDA=1); CUDA=0 skips it. The binary never links CUDA, so it runs without a GPU.
NVCC      ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA      ?= $(if $(NVCC),1,0)
NVCC_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=[sm_80,compute_80]
CUDA_LIB  = $(if $(filter 1,$(CUDA)),$(BIN)/libctrbox_cuda.so)

LIB_SRC  = io/util.c src/metrics.c src/cli.c dense/layers.c dense/optim.c embedding/optim.c dense/backend.c dense/backend_sim.c dense/device.c dense/plan.c dense/devrows.c dense/model.c embedding/table.c embedding/batch.c embedding/cache.c embedding/shrink.c embedding/sparse_optim.c embedding/tier.c embedding/quant.c src/train.c src/score.c src/runlog.c src/info.c src/report.c src/follow.c src/passes.c src/modelfile.c src/dist.c src/lanes.c embedding/shard.c \
           io/reader.c io/stream.c io/parse.c io/keymap.c \
           io/block.c datasets/cbx.c datasets/source.c datasets/gen.c datasets/fieldstats.c
TEST_SRC = $(wildcard tests/test_*.c) tests/helpers.c
FUZZ_SRC = $(wildcard tests/fuzz/fuzz_*.c)

LIB_OBJ  = $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ = $(TEST_SRC:%.c=$(BUILD)/%.o)

.PHONY: FORCE all deps test check-tests check-mpich demo bench bench-follow bench-mpi bench-tier bench-layout bench-gpu frappe fuzz asan tsan torture clean
all: $(BIN)/ctrbox $(BIN)/ctrbox-data $(BIN)/ctrbox-table $(CUDA_LIB)

deps:
	@bash tools/install-deps.sh

$(BUILD)/%.o: %.c $(wildcard */*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SAN) $(DEFS) -I$(BUILD) -c $< -o $@

# --version names the commit built (git describe; "unknown" outside a git checkout). The header is
# rewritten only when that changes, so a build after a commit recompiles src/cli.c alone.
COMMIT := $(shell git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
$(BUILD)/ctrbox_version.h: FORCE
	@mkdir -p $(BUILD)
	@echo '#define CTRBOX_COMMIT "$(COMMIT)"' > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
$(BUILD)/src/cli.o: $(BUILD)/ctrbox_version.h
$(BUILD)/src/dist.o: CFLAGS += $(MPI_CFLAGS)
FORCE:

$(BIN)/libctrbox_cuda.so: dense/cuda/backend_cuda.cu dense/backend.h dense/optim.h embedding/optim.h
	@mkdir -p $(BIN)
	$(if $(NVCC),,$(error CUDA=1 but nvcc was not found))
	$(NVCC) -O2 $(NVCC_ARCH) -Xcompiler -fPIC,-Wall -shared $< -o $@ -lcublas -lcudart

$(BIN)/ctrbox: $(BUILD)/src/main.o $(LIB_OBJ)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(SAN) $^ -o $@ $(LDLIBS)

$(BIN)/ctrbox-data: $(BUILD)/tools/ctrbox_data.o $(LIB_OBJ)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(SAN) $^ -o $@ $(LDLIBS)

$(BIN)/ctrbox-table: $(BUILD)/tools/ctrbox_table.o $(LIB_OBJ)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(SAN) $^ -o $@ $(LDLIBS)

$(BIN)/ctrbox-tests: $(TEST_OBJ) $(LIB_OBJ)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(SAN) $^ -o $@ $(LDLIBS) -lcriterion

# A preload that starts every new thread late (robust::a_late_blas_worker_does_not_hang); built
# without the sanitizers, whose runtime must come first in a process (the test skips under them).
$(BIN)/late-threads.so: tests/late_threads.c
	@mkdir -p $(BIN)
	$(CC) -O2 -std=gnu11 -Wall -Wextra -shared -fPIC $< -o $@ -ldl

$(BIN)/bench-ingest: $(BUILD)/bench/bench_ingest.o $(LIB_OBJ)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(SAN) $^ -o $@ $(LDLIBS)

$(BIN)/bench-tier: $(BUILD)/bench/bench_tier.o $(LIB_OBJ)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(SAN) $^ -o $@ $(LDLIBS)

$(BIN)/bench-layout: $(BUILD)/bench/bench_layout.o $(LIB_OBJ)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(SAN) $^ -o $@ $(LDLIBS)

$(BIN)/bench-train: $(BUILD)/bench/bench_train.o $(LIB_OBJ)
	@mkdir -p $(BIN)
	$(CC) $(CFLAGS) $(SAN) $^ -o $@ $(LDLIBS)

# The test suite: Criterion, all tests in one binary (tests that need ../shared/data skip without it).
test: deps
	@$(MAKE) --no-print-directory check-tests

check-tests: all $(BIN)/ctrbox-tests $(BIN)/late-threads.so
	CTRBOX_BIN=$(abspath $(BIN)) $(BIN)/ctrbox-tests --jobs 2

# The same tests under AddressSanitizer and UndefinedBehaviorSanitizer.
asan: deps
	@$(MAKE) --no-print-directory BUILD=build-asan BIN=bin-asan OPT=-O1 \
	    SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" check-tests

# The threads of a tiered run under ThreadSanitizer (tests/tsan.sh says what it covers and why the
# Criterion tests are not run under it). The element-wise kernels are built without their per-CPU
# clones: ThreadSanitizer would instrument the clones' resolvers, which run before it starts.
tsan: deps
	@$(MAKE) --no-print-directory BUILD=build-tsan BIN=bin-tsan OPT=-O1 \
	    SAN="-fsanitize=thread -fno-omit-frame-pointer -DCTRBOX_NO_CLONES" all
	@bash tests/tsan.sh bin-tsan

demo: deps all
	@bash bench/demo.sh

bench:
	@bash tools/install-deps.sh bench
	@$(MAKE) --no-print-directory all $(BIN)/bench-ingest $(BIN)/bench-train $(BIN)/bench-tier
	@bash bench/bench_ingest.sh
	@bash bench/bench_train.sh
	@bash bench/bench_tier.sh
	@bash bench/bench_follow.sh
	@bash bench/bench_mpi.sh

# --follow catching up on a folder against one run over the same files (~10 min).
bench-follow:
	@$(MAKE) --no-print-directory all
	@bash bench/bench_follow.sh

# Two processes against one on this machine, and the scaling on paper (docs/performance.md; ~3 min).
bench-mpi:
	@$(MAKE) --no-print-directory all
	@bash bench/bench_mpi.sh

# The SSD tier's benchmarks alone (prefetch vs fio, end to end vs in memory, peak RSS; ~25 min).
bench-tier:
	@bash tools/install-deps.sh bench
	@$(MAKE) --no-print-directory all $(BIN)/bench-tier
	@bash bench/bench_tier.sh

# The two SSD-tier layouts of docs/performance.md, measured again (needs ~3 GB in /tmp).
bench-layout:
	@bash tools/install-deps.sh bench
	@$(MAKE) --no-print-directory $(BIN)/bench-layout
	@bash bench/bench_layout.sh

# On a machine with an NVIDIA GPU: build with CUDA, run the GPU tests, benchmark against PyTorch on
# the GPU (bench/gpu.sh says what it measures).
bench-gpu:
	@bash bench/gpu.sh

# Frappe quality (BARS protocol): trains LR, FM, DeepFM, DCN-V2, DLRM and prints their test AUC.
frappe: deps all
	@bash bench/frappe.sh

# The robustness harness (tests/torture.sh): kill -9 and resume, corruption of every file kind,
# full disks, memory limits; TORTURE_COUNT trials per loop from TORTURE_SEED (default: the clock).
TORTURE_COUNT ?= 20
TORTURE_LOOPS ?= kill corrupt disk memory follow
torture: deps all $(BIN)/late-threads.so
	@bash tools/install-deps.sh torture
	@bash tests/torture.sh "$(TORTURE_LOOPS)" $(TORTURE_COUNT) $(TORTURE_SEED)

# The MPI code built with MPICH and run with its mpiexec (tests/mpich.sh)
check-mpich:
	@bash tests/mpich.sh

FUZZ_TIME ?= 60
fuzz:
	@bash tools/install-deps.sh fuzz
	@bash tests/fuzz/run.sh $(FUZZ_TIME)

clean:
	rm -rf build build-asan build-avx2 build-fuzz build-tsan bin bin-asan bin-avx2 bin-tsan
