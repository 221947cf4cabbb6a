# steward — make targets. Every target works on a fresh machine with Go and python3 installed; `test`
# builds MinIO and etcd into .tools/ on first use (~4 and ~3 minutes, cached afterwards) and installs
# the Lance engine's pinned wheels into .tools/lance (~1 minute, cached by the lock's hash).

GO      ?= go
BIN     := bin/steward
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
COMMIT  := $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
# `make release`: stripped static binaries, one per platform, into dist/ with SHA256SUMS.
RELEASE_PLATFORMS := linux/amd64 linux/arm64
# Fuzz targets run briefly in `make test`; FUZZTIME=1m for a longer look.
FUZZTIME ?= 5s
BENCH_ROWS ?= 10000000
# make bench BENCH_ROUNDS=3: three interleaved rounds, each ratio the median of its rounds (the
# Lance pairs run ABBA on odd rounds and BAAB on even ones: an even count balances them).
BENCH_ROUNDS ?= 1

.PHONY: all build campaign release run test unit fuzz bench bench-round bench-lance bench-lance-round minio etcd lance v2vm clean

all: build

# Static like the release binaries and the binary the tests run (internal/testing/testbin): a cgo build
# is another program for containment (psx) and maps libc into every worker. The worker executable
# (cmd/steward-worker, its segments on 2 MiB boundaries) is built first and embedded into steward
# through -overlay, so nothing is written into the source tree and a steward only ever starts
# workers of its own build.
# The -overlay file that embeds the worker built at $(1) (make build, make release).
worker_overlay = printf '{"Replace":{"%s":"%s"}}' "$(CURDIR)/cmd/steward/steward-worker" "$(CURDIR)/$(1)" > $(1).overlay.json

build:
	@mkdir -p $(dir $(BIN))
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-R=0x200000' -o $(BIN)-worker ./cmd/steward-worker
	$(call worker_overlay,$(BIN)-worker)
	CGO_ENABLED=0 $(GO) build -trimpath -tags=leanworker -overlay=$(BIN)-worker.overlay.json -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/steward

# The fault campaign's command: a test tool, not shipped, built beside the steward whose sidecars it
# runs (README "Fault campaign").
campaign: build
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)-campaign ./cmd/steward-campaign

# Static (CGO_ENABLED=0), path-free (-trimpath), stripped (-s -w) binaries named
# steward-<version>-<os>-<arch>, and their checksums. Then checks: the checksums verify, each
# binary was built static for its platform, and the linux/amd64 one runs and reports this
# version and commit.
release:
	rm -rf dist && mkdir -p dist
	@set -e; for p in $(RELEASE_PLATFORMS); do os=$${p%/*}; arch=$${p#*/}; \
	  echo "build dist/steward-$(VERSION)-$$os-$$arch"; \
	  w=dist/.worker-$$os-$$arch; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '-s -w -R=0x200000' -o $$w ./cmd/steward-worker; \
	  $(call worker_overlay,$$w); \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -tags=leanworker -overlay=$$w.overlay.json -ldflags '-s -w $(LDFLAGS)' \
	    -o dist/steward-$(VERSION)-$$os-$$arch ./cmd/steward; \
	  rm -f $$w $$w.overlay.json; \
	  $(GO) version -m dist/steward-$(VERSION)-$$os-$$arch | grep -q "CGO_ENABLED=0" || { echo "dist/steward-$(VERSION)-$$os-$$arch is not static"; exit 1; }; \
	  $(GO) version -m dist/steward-$(VERSION)-$$os-$$arch | grep -q "GOARCH=$$arch" || { echo "dist/steward-$(VERSION)-$$os-$$arch is not $$arch"; exit 1; }; \
	done
	cd dist && sha256sum steward-* > SHA256SUMS && sha256sum --quiet -c SHA256SUMS
	@out="$$(dist/steward-$(VERSION)-linux-amd64 version)"; echo "$$out"; \
	  echo "$$out" | grep -qx "steward $(VERSION)" || { echo "make release: the amd64 binary does not report version $(VERSION)"; exit 1; }; \
	  echo "$$out" | grep -q "^commit  $(COMMIT)" || { echo "make release: the amd64 binary does not report commit $(COMMIT)"; exit 1; }
	@cat dist/SHA256SUMS

# The README's first command: the demo (dataset, sidecar through go-plugin, dispatcher, index
# builds, an OOM kill on purpose, lookups, jobs table, ledger).
# The Lance engine is installed first; if that is impossible the demo still runs on the built-in
# engine, and says so here.
run: build
	@scripts/lance.sh install || echo "make run: the Lance engine could not be installed (scripts/lance.sh install failed); the demo runs on the built-in engine only" >&2
	$(BIN) demo

minio:
	scripts/minio.sh install

# A pinned etcd server (and etcdctl) for the tests' 3-member clusters (internal/testing/testetcd).
etcd:
	scripts/etcd.sh install

# The Lance engine (engines/lance): its locked wheels downloaded once into .tools/lance-wheels, and a venv
# with exactly them (the install test makes a fresh venv from the same folder, with no index).
lance:
	scripts/lance.sh install

# The pure cgroup v2 VMs (internal/testing/v2vm): QEMU (apt, needs root) and two kernels (6.1 cloud;
# 6.12 generic with its 9p and overlay modules), all pinned, into .tools/v2vm (~40 s once). Without
# them the VM tests skip, or fail under STEWARD_REQUIRE_REAL=1, which makes a failed install fail
# here too.
v2vm:
	@scripts/v2vm.sh install || { echo "make v2vm: scripts/v2vm.sh install failed: the pure cgroup v2 VM test cannot run" >&2; [ "$$STEWARD_REQUIRE_REAL" != 1 ]; }

# The one test command (README, .ci/run): MinIO, etcd, the Lance venv and the v2 VM installed if
# missing, then every test, the pure cgroup v2 VMs (verbose: the kernel, each test and the time in
# the VM are in the log; ~1 minute for isolation's v2 tests and the sidecar on 6.1, ~3 for the
# Lance engine on 6.12 over the host's root, under 1 for deploy/systemd's unit under the host's
# systemd), the race detector on the concurrency-heavy packages, and each fuzz target for
# $(FUZZTIME).
test: minio etcd lance v2vm
	@unformatted="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	GOOS=darwin $(GO) build ./...
	$(GO) test -count=1 -timeout 20m $$($(GO) list ./... | grep -v '/internal/testing/v2vm$$')
	$(GO) test -count=1 -v -timeout 20m ./internal/testing/v2vm/
	$(GO) test -count=1 -race -timeout 20m ./rpc/ ./sidecar/...
	$(MAKE) fuzz

fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
	    out="$$($(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg 2>&1)" || \
	    if echo "$$out" | grep -q 'context deadline exceeded' && ! echo "$$out" | grep -qi 'failing input'; then \
	      echo "fuzz $$pkg $$f: the fuzz coordinator's deadline race (go.dev/issue/75804, no input written): once more"; \
	      out="$$($(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg 2>&1)" || { echo "$$out" | grep -v '^fuzz: elapsed'; exit 1; }; \
	    else echo "$$out" | grep -v '^fuzz: elapsed'; exit 1; fi; \
	  done; \
	done

# Every benchmark of the project, then one table of the headline ratios (each against a baseline
# measured in the same run). Raw output is kept in bench.out. BENCH_ROWS sizes the index benchmarks
# (default 10M rows, generated once into $$TMPDIR/steward-bench). The Lance rows (issue #12 item 8)
# compare the Lance engine, alone and through the sidecar, with bare pylance processes on datasets
# generated once into the same folder (1M rows; 100k x 128 for IVF_PQ), on a local store and on
# MinIO, and 100 small Lance jobs through host/dispatch: ~7 minutes a round at load 5-9, more
# than twice that at load 15.
bench: minio etcd lance build
	@rm -f bench.out
	@for round in $$(seq 1 $(BENCH_ROUNDS)); do \
	  echo "# bench round $$round of $(BENCH_ROUNDS)"; \
	  STEWARD_BENCH_ROUND=$$round $(MAKE) --no-print-directory bench-round || exit 1; \
	done
	@echo
	@$(GO) run ./scripts/benchtable < bench.out
	@if grep -q -e '^--- FAIL' -e '^FAIL' bench.out; then echo "make bench: benchmarks failed (their rows are missing above):"; grep -e '^--- FAIL' bench.out; exit 1; fi

# One round of every benchmark, appended to bench.out (make bench runs BENCH_ROUNDS of them,
# interleaved, and benchtable keeps each ratio's median round).
bench-round:
	$(GO) test -run '^$$' -bench . -benchtime 2s -count 1 ./host/ 2>/dev/null | tee -a bench.out
	STEWARD_REQUIRE_REAL=1 $(GO) test -run '^$$' -bench JobLifecycle -benchtime 300x -count 1 ./host/dispatch/ | grep -v '^{' | tee -a bench.out
	STEWARD_REQUIRE_REAL=1 $(GO) test -run '^$$' -bench . -benchtime 200x -count 1 ./isolation/ | tee -a bench.out
	STEWARD_REQUIRE_REAL=1 $(GO) test -run '^$$' -bench 'MutateNoop|MutateSaturated' -benchtime 100x -count 1 ./sidecar/ 2>/dev/null | grep -v '^{' | tee -a bench.out
	STEWARD_REQUIRE_REAL=1 $(GO) test -run '^$$' -bench LanceBuild -benchtime 1x -count 1 -timeout 30m ./internal/testing/enginetest/ | tee -a bench.out
	STEWARD_REQUIRE_REAL=1 $(GO) test -run '^$$' -bench LanceSidecar -benchtime 1x -count 1 -timeout 30m ./sidecar/ 2>/dev/null | grep -v '^{' | tee -a bench.out
	STEWARD_REQUIRE_REAL=1 $(GO) test -run '^$$' -bench LanceDispatch -benchtime 1x -count 1 -timeout 30m ./host/dispatch/ 2>/dev/null | grep -v '^{' | tee -a bench.out
	STEWARD_REQUIRE_REAL=1 $(GO) test -run '^$$' -bench LanceSegments -benchtime 1x -count 1 -timeout 30m ./sidecar/ 2>/dev/null | grep -v '^{' | tee -a bench.out
	$(GO) test -run '^$$' -bench Stage90MB -benchtime 20x -count 1 ./storage/ | tee -a bench.out
	STEWARD_REQUIRE_REAL=1 $(GO) test -run '^$$' -bench GatewayScan -benchtime 2x -count 1 ./storage/gateway/ | tee -a bench.out
	STEWARD_REQUIRE_REAL=1 $(GO) test -run '^$$' -bench 'TicketMemory|CleanupThroughput|Reserve' -count 1 -timeout 30m ./storage/ledger/ | tee -a bench.out
	STEWARD_REQUIRE_REAL=1 $(GO) test -run '^$$' -bench 'UploadPath|JournalCommit' -benchtime 200x -count 1 -timeout 30m ./storage/ledger/ | tee -a bench.out
	STEWARD_REQUIRE_REAL=1 STEWARD_BENCH_ROWS=$(BENCH_ROWS) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./storage/dataset/ | tee -a bench.out

# Only issue 43's rows (the Lance engine through steward, on a local store and MinIO, 100 Lance
# jobs through host/dispatch, contained against uncontained launches), BENCH_ROUNDS interleaved
# rounds into bench.out and the same table: what to re-run after a change on the Lance path.
bench-lance: minio lance build
	@rm -f bench.out
	@for round in $$(seq 1 $(BENCH_ROUNDS)); do \
	  echo "# bench round $$round of $(BENCH_ROUNDS)"; \
	  STEWARD_BENCH_ROUND=$$round $(MAKE) --no-print-directory bench-lance-round || exit 1; \
	done
	@echo
	@$(GO) run ./scripts/benchtable < bench.out
	@if grep -q -e '^--- FAIL' -e '^FAIL' bench.out; then echo "make bench-lance: benchmarks failed (their rows are missing above):"; grep -e '^--- FAIL' bench.out; exit 1; fi

bench-lance-round:
	STEWARD_REQUIRE_REAL=1 $(GO) test -run '^$$' -bench 'LaunchNoop/(contained-paired|namespace-floor)' -benchtime 200x -count 1 ./isolation/ | tee -a bench.out
	STEWARD_REQUIRE_REAL=1 $(GO) test -run '^$$' -bench LanceSidecar -benchtime 1x -count 1 -timeout 30m ./sidecar/ 2>/dev/null | grep -v '^{' | tee -a bench.out
	STEWARD_REQUIRE_REAL=1 $(GO) test -run '^$$' -bench LanceDispatch -benchtime 1x -count 1 -timeout 30m ./host/dispatch/ 2>/dev/null | grep -v '^{' | tee -a bench.out

clean:
	rm -rf bin dist
