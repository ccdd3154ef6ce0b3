# muxflow build entry point. Everything built lands under build/ (git-ignored):
#   build/bin  — programs: Go (muxd, muxctl, muxflow-wrapper, gpusimd, ...) and C
#                (muxflow-runtime and muxflow-hook, from hook/native)
#   build/lib  — C libraries (libxcuda.so, gpusim's fake libcuda.so.1, ...)
# C parts are the folders (top level, or one below) that carry their own Makefile; each
# understands the targets all, test, bench and clean, and the variable BUILD.

BUILD   ?= $(CURDIR)/build
GO      ?= go
# The version the programs report (--version) is the packages' version (packaging/version.sh),
# with +dirty when the working tree has uncommitted changes.
VERSION ?= $(shell sh packaging/version.sh 2>/dev/null || echo 0.0.0~dev)
LDFLAGS := -X github.com/muxflow/muxflow/muxd/buildinfo.Version=$(VERSION)
C_PARTS := $(patsubst %/Makefile,%,$(wildcard */Makefile */*/Makefile))
GOTEST_FLAGS ?= -count=1 -timeout 12m

export BUILD

.PHONY: all build go-build c-build test go-test c-test k8s-e2e docs-test bench lint demo deps package clean

all: build

build: go-build c-build

go-build:
	@mkdir -p $(BUILD)/bin
	$(GO) build -buildmode=pie -ldflags '$(LDFLAGS)' -o $(BUILD)/bin/ $$($(GO) list ./... | grep '/cmd/')

c-build:
	@for d in $(C_PARTS); do $(MAKE) -C $$d all BUILD=$(BUILD) || exit 1; done

# deps installs what the tests need on a fresh Debian machine (CI runs as root).
deps:
	./tests/deps.sh

# containerd 2 (Debian ships 1.6) for the tests that check version 3 configuration files;
# built from source at the version go.mod pins for the containerd client.
CONTAINERD2 := $(BUILD)/tools/containerd
$(CONTAINERD2):
	@mkdir -p $(BUILD)/tools
	cd /tmp && GOBIN=$(BUILD)/tools GOFLAGS= $(GO) install github.com/containerd/containerd/v2/cmd/containerd@$$(cd $(CURDIR) && $(GO) list -m -f '{{.Version}}' github.com/containerd/containerd/v2)

test: deps build $(CONTAINERD2) go-test c-test k8s-e2e docs-test

# The calibration test replays published measurements in real time, with simulated
# processes that need the CPU: it runs on its own after the other packages, whose tests
# would otherwise take that CPU and skew its points (nos_mps_3 read -21% beside them).
# (The package list is taken first, so that a failing `go list` fails the target instead
# of leaving `go test` an empty list, which would test only the root package.)
go-test:
	pkgs=$$($(GO) list ./...) && MUXFLOW_BUILD=$(BUILD) $(GO) test $(GOTEST_FLAGS) $$(echo "$$pkgs" | grep -v '/gpusim/calibration$$')
	MUXFLOW_BUILD=$(BUILD) $(GO) test $(GOTEST_FLAGS) ./gpusim/calibration

c-test:
	@for d in $(C_PARTS); do $(MAKE) -C $$d test BUILD=$(BUILD) || exit 1; done

# k8s-e2e runs a real single-node Kubernetes cluster (etcd, apiserver, scheduler with
# muxmatch as extender, controller-manager, kubelet, containerd + the muxflow runtime,
# muxd, muxflow-device-plugin, gpusim) and checks pairing, deletion and eviction
# (tests/k8s/run.sh, docs/kubernetes.md). Kubernetes is built once into
# /var/cache/muxflow-k8s (MUXFLOW_K8S_CACHE), keyed by tests/k8s/build's go.mod.
k8s-e2e: build
	BUILD=$(BUILD) ./tests/k8s/run.sh

# bench first prints muxflow's own overhead next to its baselines (tests/bench, issue 19:
# muxd CPU and RSS against a muxd built from BENCH_BASE_REV, NVML calls per sample,
# muxmatch warm against cold re-plan; docs/performance.md), then every Go and C benchmark
# (hook/e2e's BenchmarkRuncRun: container start against plain runc). BENCH_BASE_REV=
# (empty) skips the baseline muxd; BENCH_FLAGS passes flags to tests/bench.
BENCH_BASE_REV ?= 42af0a3
BENCH_FLAGS    ?=
# docs-test runs the shell blocks marked runnable in docs/install.md,
# docs/try-without-a-gpu.md and docs/kubernetes.md against freshly built packages, each
# document in a throwaway root (tests/docs/README.md). Root, like the package test.
docs-test: build
	BUILD=$(BUILD) ./tests/docs/run.sh

bench: build
	@base=""; if [ -n "$(BENCH_BASE_REV)" ]; then d=$(BUILD)/bench-base; rm -rf $$d && mkdir -p $$d/src && \
	  git archive $(BENCH_BASE_REV) | tar -x -C $$d/src && (cd $$d/src && $(GO) build -buildmode=pie -o $$d/muxd ./muxd/cmd/muxd) && \
	  base="-base-muxd $$d/muxd"; fi; \
	MUXFLOW_BUILD=$(BUILD) $(GO) run ./tests/bench $$base $(BENCH_FLAGS)
	MUXFLOW_BUILD=$(BUILD) $(GO) test -run '^$$' -bench . -benchtime 2s ./...
	@for d in $(C_PARTS); do $(MAKE) -C $$d bench BUILD=$(BUILD) || exit 1; done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

demo: build
	./tests/demo.sh

# package builds dist/muxflow_*.deb and dist/muxflow-*.rpm (see packaging/README.md).
package: build
	$(MAKE) -C packaging package

clean:
	rm -rf $(BUILD) dist
	@for d in $(C_PARTS); do $(MAKE) -C $$d clean BUILD=$(BUILD); done
