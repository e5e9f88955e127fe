GO      ?= go
BIN     := bin/pollux
SHARED  ?= ../shared/pollux-artifact
PKGS    := ./...

.PHONY: all build test bench demo demo-real demo-federation sim lint fmt-check vet proto chaos clean screenshots

all: build

build:
	$(GO) build -o $(BIN) ./cmd/pollux

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# The test target CI runs: formatting, vet, then every test under the race
# detector. The real PyTorch workers of actors/node/worker, whose step times the
# tests fit and predict, run last and alone, so that no other package's
# processes share their cores; so do the real demo's tests of cmd/pollux
# (a whole cluster training three real jobs).
# Tests that host two protoactor remotes in one process race inside the
# library (deps-notes) and are built with !race: they run once more
# without the detector.
SOLO      := pollux/actors/node/worker
SOLOTESTS := ^TestRealDemo
NORACE    := ^TestLogsActorAnswersServers$$
# The judge's own test: pollux built with planted bugs (build tag
# judgebugs), each of which the chaos judge must report; alone at the
# end, since its short runs are timed on a loaded machine's clock. Never
# from the test cache: the pollux it runs is built by the test, so the
# cache cannot tell when its sources changed.
JUDGEBUGS := ^TestJudgeCatchesPlantedBugs$$
test: fmt-check vet
	$(GO) test -race -timeout 40m -skip '$(SOLOTESTS)' $$($(GO) list $(PKGS) | grep -vx '$(SOLO)')
	$(GO) test -timeout 10m -run '$(NORACE)' ./actors/agent
	$(GO) test -race -timeout 20m $(SOLO)
	$(GO) test -race -timeout 20m -run '$(SOLOTESTS)' ./cmd/pollux
	$(GO) test -count=1 -tags judgebugs -timeout 30m -run '$(JUDGEBUGS)' ./testbed/chaos/driver

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# staticcheck (unused code, ineffective assignments, misused APIs) at a
# pinned version, fetched by the go command like any module.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint: fmt-check vet
	$(GO) run $(STATICCHECK) $(PKGS)

# The full fault-injection run: every scenario of the catalogue (103
# faults, 34 of them network faults when run as root with iptables), each
# on a fresh 5-process cluster, judged from the client history and the
# workers' own records; exits 1 if a job was lost, failed or never
# submitted, an invariant broke, or a fault or failover was missing.
# CHAOS_SEED picks the schedules (default 1).
chaos: build
	./$(BIN) chaos --scenario all --seed $${CHAOS_SEED:-1}

# The main job on built-in defaults (no ../shared needed): a whole cluster
# (3 servers, 4 agents of 4 emulated GPUs) runs a dozen jobs, then stops.
demo: build
	./$(BIN) demo

# Real PyTorch training on a whole cluster (3 servers, 2 agents of 2 CPU
# slots; needs `apt-get install -y python3-torch python3-sklearn`): two
# digits CNNs and an MLP, each resized as the others arrive and finish,
# trained to their target accuracies; prints the result as JSON. About 2
# minutes on two busy cores (docs/worker-library.md).
demo-real: build
	./$(BIN) demo --real --json

# Three federated labs on this machine lending each other GPUs
# (docs/federation.md).
demo-federation: build
	./$(BIN) demo --federation

# Regenerates docs/dashboard-cluster.png and docs/dashboard-job.png: the
# dashboard's browser test (a secured cluster, headless Chromium; needs
# `apt-get install -y chromium`) saves them there.
screenshots:
	POLLUX_SCREENSHOTS_DIR=$(CURDIR)/docs $(GO) test -count=1 -run '^TestDashboardInBrowser$$' ./cmd/pollux

# The simulator on built-in defaults: Pollux vs Tiresias vs Optimus.
sim: build
	./$(BIN) sim --policy all

clean:
	rm -rf bin out

# Regenerates the committed protobuf code. Needs protoc (Debian:
# protobuf-compiler) and protoc-gen-go v1.36.12:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO ?= $(shell $(GO) env GOPATH)/bin/protoc-gen-go
proto:
	protoc --plugin=protoc-gen-go=$(PROTOC_GEN_GO) --go_out=. --go_opt=module=pollux actors/pb/messages.proto actors/pb/lease.proto actors/pb/logs.proto
