# flow — build, test, demo.  `make demo` and `make check` work on a bare Debian
# machine: both run `make deps` first, which apt-installs whatever is missing.

CC      ?= cc
# `make V=1` shows the full commands.
Q       := $(if $(V),,@)
PKGS    := lua5.4 libcjson libcurl libcrypto libmd yaml-0.1 readline expat
# What the flow binary links: libcurl is opened when first needed
# (engine/azureml/curl_lib.h), so that its 28 libraries do not load at every
# start; libcrypto likewise, at the first hash of more than 8 KiB (libmd,
# linked, hashes the small ones: engine/hash.c, engine/crypto_lib.h); readline
# when `flow repl` first reads a terminal (engine/line_editor.c).
LINK_PKGS := lua5.4 libcjson libmd yaml-0.1 expat
BUILD   := build
WARN    := -Wall -Wextra -Wconversion -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
# CI builds with WERROR=1: a warning fails the build.
ifeq ($(WERROR),1)
WARN    += -Werror
endif
CFLAGS  ?= -O2 -g
ifeq ($(ASAN),1)
CFLAGS  += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer
LDFLAGS += -fsanitize=address,undefined
BUILD   := build-asan
endif
# pkg-config runs when a recipe first needs its output, once, not when the
# Makefile is read: `make deps` must work on a machine that lacks what it
# installs.  A missing package stops the build with its name.
pkg_missing = $(strip $(foreach p,$(PKGS),$(if $(shell pkg-config --exists $(p) 2>/dev/null && echo y),,$(p))))
pkg_tool    = $(if $(shell command -v pkg-config 2>/dev/null),,$(error pkg-config not found; `make deps` installs it))
pkg_check   = $(pkg_tool)$(if $(pkg_missing),$(error missing packages (pkg-config names): $(pkg_missing); `make deps` installs them))
pkg_config  = $(pkg_check)$(shell pkg-config $(1) $(PKGS))
PKG_CFLAGS = $(eval PKG_CFLAGS := $(call pkg_config,--cflags))$(PKG_CFLAGS)
PKG_LIBS   = $(eval PKG_LIBS := $(pkg_check)$(shell pkg-config --libs $(LINK_PKGS)) -ldl -lpthread)$(PKG_LIBS)
# Unit tests may call libcurl and libcrypto themselves (a plain request beside
# flow's client, a signature checked by OpenSSL directly).
TEST_LIBS  = $(PKG_LIBS) $(shell pkg-config --libs libcurl libcrypto)
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -iquote engine -iquote lua -iquote $(BUILD) $(PKG_CFLAGS) -MMD -MP

ENGINE_SRC := $(wildcard engine/*.c engine/azureml/*.c)
LUA_SRC    := $(filter-out lua/main.c,$(wildcard lua/*.c))
STDLIB     := $(shell find stdlib -name '*.lua' | sort)
LIB_OBJ    := $(patsubst %.c,$(BUILD)/%.o,$(ENGINE_SRC) $(LUA_SRC)) $(BUILD)/stdlib_embed.o
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
# The e2e tests' fault injection (LD_PRELOAD): failing writes, syncs, renames.
FAULTSHIM  := $(BUILD)/tests/libfaultshim.so

.PHONY: all deps test-deps demo check test unit e2e bench clean asan install uninstall
all: flow

# Packages the tests use beyond the build: real PyTorch (DDP), Open MPI,
# strace (the power-loss order of group commit, t_resume.sh), what the Azure
# ML test double and test_aml_http's server run on (Debian's python3 with
# jsonschema and cryptography, the openssl and curl commands), and the Azure
# ML SDK itself (python3-azure), the ground truth for the code snapshot's
# content hash, headless Chromium, in which the pages flow writes (a sweep's
# report.html) are loaded and checked, Graphviz, which checks flow viz's DOT, and PyYAML, with which
# tests/aml/pipeline_yaml.py reads flow compile's YAML as the az ml CLI does, man-db, which renders the
# manual page (`man -l`), and zsh, which checks its completion.  Azurite (npm) is installed
# by tools/azurite.sh.
TEST_PKGS := python3-torch openmpi-bin python3-mpi4py strace python3 python3-jsonschema python3-cryptography python3-yaml chromium graphviz \
             openssl curl python3-azure man-db zsh locales

deps:
	@tools/deps.sh

test-deps:
	@tools/deps.sh $(TEST_PKGS)
	@tools/azurite.sh >/dev/null

# ./flow is always the normal build (make asan tests build-asan/flow in place).
# Copy then rename: replacing a binary that is running must not fail.
flow: build/flow
	@cp $< $@.tmp && mv -f $@.tmp $@

$(BUILD)/flow: $(BUILD)/lua/main.o $(BUILD)/libflow.a
	@echo "  LINK  $@"
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS) -lm

$(BUILD)/libflow.a: $(LIB_OBJ)
	@rm -f $@
	$(Q)ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

# The Lua half of the engine is compiled into the binary as Lua bytecode
# (tools/embed.c writes a C array).  Plain flags, not the build's: it runs at
# build time, against the same liblua5.4 as flow.
$(BUILD)/tools/embed: tools/embed.c
	@mkdir -p $(dir $@)
	$(Q)$(CC) -std=c11 -O2 -Wall -Wextra $(PKG_CFLAGS) -o $@ $< $(PKG_LIBS)

$(BUILD)/stdlib_embed.c: $(BUILD)/tools/embed $(STDLIB)
	@echo "  EMBED stdlib/"
	$(Q)$(BUILD)/tools/embed stdlib $(STDLIB) > $@.tmp && mv $@.tmp $@

$(BUILD)/stdlib_embed.o: $(BUILD)/stdlib_embed.c
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libflow.a tests/unit/check.h
	@mkdir -p $(dir $@)
	@echo "  TEST  $@"
	$(Q)$(CC) $(ALL_CFLAGS) -iquote tests/unit -o $@ $< $(BUILD)/libflow.a $(LDFLAGS) $(TEST_LIBS) -lm

# Plain flags, not the build's: it is preloaded into the ASan binary too.
$(FAULTSHIM): tests/e2e/faultshim.c
	@mkdir -p $(dir $@)
	@echo "  SHIM  $@"
	$(Q)$(CC) -std=c11 -O2 -Wall -Wextra -U_FORTIFY_SOURCE -shared -fPIC -o $@ $< -ldl

demo: deps
	@$(MAKE) --no-print-directory flow
	@cd examples/hello && ../../flow run

check: test-deps
	@$(MAKE) --no-print-directory $(BUILD)/flow $(UNIT_BIN) $(FAULTSHIM)
	@tests/run.sh $(BUILD)

asan:
	@$(MAKE) --no-print-directory ASAN=1 check

# The Azure ML rows of the benchmark (bench/aml.sh, issue 13) run the test
# double and Azurite, and compare with the Azure ML SDK (python3-azure).
BENCH_PKGS := python3 python3-jsonschema python3-cryptography openssl curl python3-azure

bench: deps
	@tools/deps.sh $(BENCH_PKGS) || echo "bench: could not install $(BENCH_PKGS): the Azure ML rows say what is missing"
	@tools/azurite.sh >/dev/null || echo "bench: could not install Azurite: the Azure ML rows are not run"
	@$(MAKE) --no-print-directory flow
	@bench/run.sh

# make install [PREFIX=/usr/local] [DESTDIR=]: the binary (self-contained: the
# stdlib is compiled into it), its manual page and bash and zsh completions.
PREFIX      ?= /usr/local
INSTALL_BIN ?= $(BUILD)/flow
INSTALLED   := bin/flow share/man/man1/flow.1 share/bash-completion/completions/flow share/zsh/site-functions/_flow

install: $(INSTALL_BIN)
	install -D -m 755 $(INSTALL_BIN) $(DESTDIR)$(PREFIX)/bin/flow
	install -D -m 644 docs/flow.1 $(DESTDIR)$(PREFIX)/share/man/man1/flow.1
	install -D -m 644 completions/flow.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/flow
	install -D -m 644 completions/_flow $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_flow

uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/,$(INSTALLED))

clean:
	rm -rf build build-asan flow

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
