# kemu — see README.md. Every target installs what it needs first.
SHELL := /bin/bash
.DEFAULT_GOAL := build

OUT        := _out
BIN        := $(OUT)/bin
TOOLS      := $(OUT)/tools/bin
GO         ?= go
TEST_TAGS  := qemu cluster
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS    := -X main.version=$(VERSION)
COMMANDS   := $(notdir $(wildcard cmd/*))
# grpcnotrace: grpc-go without golang.org/x/net/trace, whose html/template makes the linker keep every
# exported method (kemu-launcher 25.5 -> 20.5 MB, kemu-api 70 -> 47 MB; hack/images/gobuild.Tags).
BUILD_TAGS := grpcnotrace

.PHONY: build deps generate verify-generated lint test test-qemu-distro unit fuzz testguest k8s images demo demo-cluster bench clean

## build: every binary into _out/bin
build:
	@mkdir -p $(BIN)
	$(GO) build -trimpath -tags '$(BUILD_TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN)/ $(addprefix ./cmd/,$(COMMANDS))

## deps: apt packages and pinned Go tools (idempotent, skips what is there)
deps:
	@bash hack/install-deps.sh

## generate: deepcopy, CRDs, clientset, listers, informers
generate: deps
	@bash hack/update-codegen.sh

## verify-generated: fail if generated files are stale
verify-generated: deps
	@bash hack/verify-codegen.sh

## lint: gofmt, go vet, staticcheck (all build tags); actionlint (with shellcheck) over .github/workflows, shellcheck over action.yml's steps, the distro job's, the fuzz and the demo-cluster scripts
lint: deps
	@bad=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$bad" ]; then echo "gofmt needed:"; echo "$$bad"; exit 1; fi
	$(GO) vet -tags '$(TEST_TAGS)' ./...
	$(TOOLS)/staticcheck -tags '$(TEST_TAGS)' ./...
	$(TOOLS)/actionlint -shellcheck shellcheck
	$(GO) run ./hack/actionshell action.yml
	shellcheck hack/distro-root.sh hack/distro-test.sh hack/fuzz.sh hack/demo-cluster.sh

## testguest: the guest every QEMU test boots (_out/testguest)
testguest: deps
	@bash hack/testguest/build.sh

## images: kemu's launcher, controller, kemu-api and node agent images as OCI archives, no Docker (_out/images; skipped when up to date)
images: testguest
	@VERSION='$(VERSION)' bash hack/images/build.sh

## k8s: etcd, kube-apiserver, kubectl, kube-controller-manager, kube-scheduler, kubelet and the test nodes' containerd 2.x built from the Go module proxy (_out/k8s/bin)
k8s: deps
	@bash hack/k8s/build.sh etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet containerd
	@bash hack/multus/build.sh

## test: lint, generated-file check, the fuzz targets, every test suite (unit, QEMU, cluster), then make demo-cluster
## beside the QEMU suites against Debian 13's QEMU
test: lint verify-generated fuzz testguest k8s images
	$(GO) test -race -count=1 -timeout 40m -tags '$(TEST_TAGS)' ./...
	@# Side by side: the distro suites run one QEMU at a time and leave a core
	@# to the demo's cluster; each one's output is printed when it ends.
	@$(MAKE) --no-print-directory -j2 --output-sync=target demo-cluster test-qemu-distro

## test-qemu-distro: the QEMU-level suites (qmp, launcher, kemuctl run …) against Debian 13's QEMU 10.x,
## in a debootstrap'ed root (_out/distro/debian13, cached); PKGS="qmp launcher/cmdline" runs only those
test-qemu-distro: deps testguest
	@bash hack/distro-test.sh $(PKGS)

## fuzz: each fuzz target for FUZZTIME: manifest -> validation -> QEMU argv (Go fuzzes one target per run);
## a failing input is written to the package's testdata/fuzz/<target>/, which every go test replays
FUZZTIME     ?= 15s
FUZZ_TARGETS := ./api/manifest:FuzzRead ./launcher/cmdline:FuzzArgv ./launcher/cmdline:FuzzManifestArgv
fuzz:
	@FUZZTIME=$(FUZZTIME) GO=$(GO) bash hack/fuzz.sh $(FUZZ_TARGETS)

## unit: only the tests that need nothing but Go
unit:
	$(GO) test -race -count=1 ./...

## demo: the main job on a fresh machine
demo: deps build testguest
	@bash hack/demo.sh

## demo-cluster: the throw-away 2-node cluster, kemu installed with kubectl apply -k deploy/overlays/throwaway, a VM
## (examples/cluster/vm-testguest.yaml) Running with its IP, console, pause, unpause, live migration, delete, then
## uninstall and teardown, checking nothing is left (hack/demo-cluster.sh)
demo-cluster: deps build testguest k8s images
	@bash hack/demo-cluster.sh

## bench: benchmarks, figures written to docs/benchmarks.md
bench: deps testguest
	@bash hack/bench.sh

clean:
	rm -rf $(OUT)
