# Tests of hook/native. The sources are built a second time with
# AddressSanitizer and UBSan (objects and programs under $(TESTDIR)); the
# unit tests, the fuzz loop and the program tests all run on that build,
# and the program tests run once more on the release binaries.

SAN_FLAGS   := -std=c11 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Werror -D_GNU_SOURCE \
               -fsanitize=address,undefined -fno-sanitize-recover=all -Isrc -Itests
PLAIN_FLAGS := -std=c11 -O2 -g -Wall -Wextra -Werror -D_GNU_SOURCE -Isrc -Itests
SANDIR      := $(TESTDIR)/san
SANOBJDIR   := $(TESTDIR)/sanobj
SANLIBOBJS  := $(patsubst src/%.c,$(SANOBJDIR)/%.o,$(LIBSRCS))
DEFAULT_POLICY ?= ../../policy/default.toml
TESTDATA    := tests/testdata
# Test vectors shared with the Go tests (testdata/README.md).
VECTORS     ?= ../../testdata
# Sanitizer options: leaks are errors; a finding aborts with a clear exit.
SAN_ENV     := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=86 \
               UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=87

TEST_PROGS := $(TESTDIR)/unit $(TESTDIR)/vectors $(TESTDIR)/fuzz $(TESTDIR)/progtest $(TESTDIR)/fakeruntime \
              $(SANDIR)/muxflow-runtime $(SANDIR)/muxflow-hook

$(SANOBJDIR)/%.o: src/%.c $(HDRS) | $(SANOBJDIR)
	$(CC) $(SAN_FLAGS) -c -o $@ $<

$(SANOBJDIR) $(SANDIR):
	mkdir -p $@

$(SANDIR)/muxflow-runtime: $(SANOBJDIR)/runtime_main.o $(SANLIBOBJS) | $(SANDIR)
	$(CC) $(SAN_FLAGS) -o $@ $^

$(SANDIR)/muxflow-hook: $(SANOBJDIR)/hook_main.o $(SANLIBOBJS) | $(SANDIR)
	$(CC) $(SAN_FLAGS) -o $@ $^

$(TESTDIR)/unit: tests/unit.c tests/check.h $(SANLIBOBJS) | $(TESTDIR)
	$(CC) $(SAN_FLAGS) -o $@ tests/unit.c $(SANLIBOBJS)

$(TESTDIR)/vectors: tests/vectors.c tests/vec.h tests/check.h $(SANLIBOBJS) | $(TESTDIR)
	$(CC) $(SAN_FLAGS) -o $@ tests/vectors.c $(SANLIBOBJS)

$(TESTDIR)/fuzz: tests/fuzz.c tests/check.h tests/vec.h $(SANLIBOBJS) | $(TESTDIR)
	$(CC) $(SAN_FLAGS) -o $@ tests/fuzz.c $(SANLIBOBJS)

$(TESTDIR)/progtest: tests/progtest.c tests/check.h | $(TESTDIR)
	$(CC) $(SAN_FLAGS) -o $@ $<

# The stand-in runtime is not sanitized: it is exec'd by the programs
# under test and must not change what they see.
$(TESTDIR)/fakeruntime: tests/fakeruntime.c | $(TESTDIR)
	$(CC) $(PLAIN_FLAGS) -o $@ $<

test: all $(TEST_PROGS)
	$(SAN_ENV) $(TESTDIR)/unit $(DEFAULT_POLICY) $(TESTDATA)/spec-plain.json
	$(SAN_ENV) $(TESTDIR)/vectors $(VECTORS)
	$(SAN_ENV) $(TESTDIR)/fuzz $(DEFAULT_POLICY) $(TESTDATA)/spec-plain.json $(VECTORS)
	$(SAN_ENV) $(TESTDIR)/progtest $(SANDIR) $(TESTDIR)/fakeruntime $(TESTDATA)/spec-plain.json
	$(SAN_ENV) $(TESTDIR)/progtest $(BINDIR) $(TESTDIR)/fakeruntime $(TESTDATA)/spec-plain.json

# Start-up figures: see README.md.
BENCH_RUNS ?= 200

$(TESTDIR)/trivial: tests/trivial.c | $(TESTDIR)
	$(CC) -O2 -static -o $@ $<

$(TESTDIR)/floor: tests/floor.c | $(TESTDIR)
	$(CC) $(CFLAGS_N) -static-pie -o $@ $<

$(TESTDIR)/bench: tests/bench.c | $(TESTDIR)
	$(CC) $(PLAIN_FLAGS) -o $@ $<

$(TESTDIR)/muxflow-runtime-dynamic: $(OBJDIR)/runtime_main.o $(LIBOBJS) | $(TESTDIR)
	$(CC) $(CFLAGS_N) -pie -Wl,-z,now -Wl,-z,relro -o $@ $^

$(TESTDIR)/muxflow-runtime-static: $(OBJDIR)/runtime_main.o $(LIBOBJS) | $(TESTDIR)
	$(CC) $(CFLAGS_N) -static-pie -Wl,-z,now -Wl,-z,relro -o $@ $^

bench: all $(TESTDIR)/trivial $(TESTDIR)/floor $(TESTDIR)/bench \
       $(TESTDIR)/muxflow-runtime-static $(TESTDIR)/muxflow-runtime-dynamic
	$(TESTDIR)/bench $(BENCH_RUNS) $(TESTDIR)/trivial $(TESTDIR)/floor \
	    $(TESTDIR)/muxflow-runtime-static $(TESTDIR)/muxflow-runtime-dynamic \
	    $(DEFAULT_POLICY) $(TESTDATA)/spec-plain.json
