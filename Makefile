# Knotless. `make demo` runs this repository's own pipeline through a real
# server and runner; `make test` runs every test, bringing the local
# Kubernetes cluster up first (root; see docs/development.md "Try it on a local cluster").

GO      ?= go
BIN     ?= bin
DIST    ?= dist
# The one version of every program and of the release (file VERSION).
VERSION := $(strip $(shell cat VERSION))
LDFLAGS := -s -w -X knotless.dev/knotless/internal/version.Version=$(VERSION)
PROGRAMS := knotless knotless-server knotless-run knotless-agent knotless-builder
# How every program is built, as internal/deploy.Build builds the files
# the manifests' digests name (BuildEnv there): static (no cgo: nothing
# needs it, SQLite is modernc.org's Go), no build paths (-trimpath), no VCS stamp, the
# baseline instruction set; the same source, VERSION and Go release give
# the same bytes (TestRelease_MakeBuildMatchesTheManifestDigests).
STATIC  := CGO_ENABLED=0 GOFLAGS='-buildvcs=false -trimpath' GOAMD64=v1 GOARM64=v8.0

.PHONY: test-gvisor release testreport deploy-digests deploy-digests-check builder-seccomp builder-image runner-image bench-deploy all build demo test test-unit test-e2e vet fuzz bench clean cluster-harness cluster-build cluster-up cluster-down cluster-status bench-cluster bench-kube bench-builds docker-up docker-down bench-docker

all: build

# The four programs for this machine; knotless-run and knotless-agent are
# byte for byte the files of the release for its architecture.
build:
	@mkdir -p $(BIN)
	$(STATIC) $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ $(addprefix ./cmd/,$(PROGRAMS))

# The release, from this checkout, into $(DIST)/: every program for
# linux/amd64 and linux/arm64 (knotless-run-linux-amd64, ...), SHA256SUMS,
# and knotless-runner-$(VERSION)-kubernetes.yaml, the runner's manifests
# in one file with these files' digests (docs/kubernetes.md). ~1 min per
# program and architecture the first time on 2 cores.
release:
	$(TESTBUILD) $(GO) run ./scripts/deploy release -o $(DIST)

demo: build
	@bash scripts/demo.sh

# PostgreSQL (Debian's server binaries, started as nobody in a temporary
# directory), three knotless-server replicas behind a reverse proxy, 20
# runners with the shell executor, 100 pipelines pushed, one replica
# killed with SIGKILL midway and started again: prints a summary and fails
# unless every run ended exactly once with its whole log
# (docs/scaling.md). Sizes: DEMO_SCALE_FLAGS='-runners 5 -pipelines 20'.
.PHONY: demo-scale
demo-scale: build
	$(GO) run ./test/scale/cmd/demo-scale -bin $(BIN) $(DEMO_SCALE_FLAGS)

vet:
	$(TESTBUILD) $(GO) vet ./...
	cd test/cluster && $(GO) vet ./...
	cd scripts/builder-seccomp && $(GO) vet ./...

# The builder's seccomp profile, deploy/kubernetes/builds/builder-seccomp.json,
# written from containerd's RuntimeDefault (the version the local cluster
# runs) and the builder's additions by scripts/builder-seccomp, a module of
# its own so that containerd stays out of go.mod; amd64 only. A test
# (internal/deploy) fails while the file is not what it writes. The docker
# executor embeds the same bytes (internal/builder/seccomp.json: go:embed
# reads no file outside its package), copied here; a test holds them equal.
builder-seccomp:
	cd scripts/builder-seccomp && $(GO) run .
	cp deploy/kubernetes/builds/builder-seccomp.json internal/builder/seccomp.json

# Tests that need the cluster fail (instead of skipping) when it is not up;
# so do those that need a Docker engine (DOCKER_HOST, by default the one
# scripts/dockerd.sh starts: make docker-up).
CLUSTER_REQUIRED := KNOTLESS_TEST_CLUSTER_REQUIRED=1 KNOTLESS_TEST_DOCKER_REQUIRED=1
export DOCKER_HOST ?= unix:///run/knotless-dockerd/docker.sock
# The web pages' browser tests (test/e2e) fail without chromium, too; the
# PostgreSQL tests (store, replicas, migrate, demo-scale's) without
# Debian's postgresql server binaries (/usr/lib/postgresql/*/bin).
BROWSER_REQUIRED := KNOTLESS_TEST_BROWSER_REQUIRED=1 KNOTLESS_TEST_POSTGRES_REQUIRED=1

# Tests skipped for something this machine lacks (root, tmpfs and bind
# mounts, network namespaces, pseudo-terminals, cgroup v2, /proc, bash, Go)
# fail instead: CI's machine has all of it (internal/testenv).
MACHINE_REQUIRED := KNOTLESS_TEST_MACHINE_REQUIRED=1
# go test -json, printed as plain go test prints, then every skip that is
# left counted by where it was called, with its message (scripts/testreport).
TESTREPORT := $(abspath $(BIN))/testreport

testreport:
	@mkdir -p $(BIN)
	@$(GO) build -o $(TESTREPORT) ./scripts/testreport

# How the tests build: as `make build` builds the programs (STATIC), so
# every package the tests share with the programs, with internal/deploy's
# release builds and with each other compiles once (with cgo, or with
# build paths, the whole dependency tree compiled a second time; no test
# needs either). A -trimpath test binary's runtime.GOROOT is empty: tests
# ask `go env GOROOT`.
TESTBUILD := $(STATIC)
E2E := ./test/e2e
KUBE_PKG := internal/executor/kube

# Every test: unit, integration (real server, git, processes), the harness's
# own, and end to end (the built programs as processes, the cluster), each
# go test Benchmark* once (-benchtime 1x, bench-smoke's), the kube
# executor's suite again with job pods in gVisor (test-gvisor) and the
# bench program with tiny sizes. Three parts run at once (test-parts, each
# printed whole when it ends), about equally long: test/e2e; the other
# packages but the kube executor's, then the kube executor's tests that
# the gVisor suite runs, in runc; the gVisor suite, then the kube
# executor's other tests and its benchmarks (-skip: the two halves are the
# package's tests, each once), then the bench program. test/cluster's own tests
# restart the cluster, so they run after them, alone. Each part prints "### make test:
# PART took Ns" (CI's log keeps each part's time: docs/development.md "CI").
timed = start=$$(date +%s); $(2); rc=$$?; echo "\#\#\# make test: $(1) took $$(( $$(date +%s) - start ))s"; exit $$rc
test: vet cluster-up docker-up testreport build
	@$(MAKE) --no-print-directory -j3 --output-sync=target test-part-e2e test-part-packages test-part-kube-bench
	@$(call timed,test/cluster,cd test/cluster && $(CLUSTER_REQUIRED) $(MACHINE_REQUIRED) $(TESTREPORT) -- $(GO) test -count=1 -timeout 15m ./...)

.PHONY: test-part-e2e test-part-packages test-part-kube-bench
# test/e2e's parallel tests wait on pods, runs and processes far more than
# on the CPU (the package alone, warm, two at a time: 597 s of its 37
# sequential tests, then its 69 parallel ones, 728 s in all, in 364 s,
# then 130 s of benchmarks: 1,091 s, about as long as beside the other
# parts in make test), so it runs them four at a time, not GOMAXPROCS (2).
E2E_PARALLEL := 4
test-part-e2e:
	@$(call timed,test/e2e,$(TESTBUILD) $(CLUSTER_REQUIRED) $(MACHINE_REQUIRED) $(BROWSER_REQUIRED) $(TESTREPORT) -- $(GO) test -count=1 -timeout 40m -parallel $(E2E_PARALLEL) -bench . -benchtime 1x $(E2E))
test-part-packages:
	@$(call timed,./... but test/e2e and $(KUBE_PKG),$(TESTBUILD) $(CLUSTER_REQUIRED) $(MACHINE_REQUIRED) $(BROWSER_REQUIRED) $(TESTREPORT) -- $(GO) test -count=1 -timeout 40m -bench . -benchtime 1x $$($(GO) list ./... | grep -vx -e 'knotless.dev/knotless/test/e2e' -e 'knotless.dev/knotless/$(KUBE_PKG)'))
	@$(call timed,$(KUBE_PKG): the gVisor suite's tests in runc,$(TESTBUILD) $(CLUSTER_REQUIRED) $(MACHINE_REQUIRED) $(BROWSER_REQUIRED) $(TESTREPORT) -- $(GO) test -count=1 -timeout 30m -run '$(GVISOR_TESTS)' ./$(KUBE_PKG))
test-part-kube-bench:
	@$(call timed,gVisor suite,$(TESTBUILD) $(CLUSTER_REQUIRED) KNOTLESS_TEST_RUNTIME_CLASS=gvisor $(TESTREPORT) -- $(GO) test -count=1 -timeout 30m -run '$(GVISOR_TESTS)' ./$(KUBE_PKG))
	@$(call timed,$(KUBE_PKG): the other tests and the benchmarks,$(TESTBUILD) $(CLUSTER_REQUIRED) $(MACHINE_REQUIRED) $(BROWSER_REQUIRED) $(TESTREPORT) -- $(GO) test -count=1 -timeout 40m -skip '$(GVISOR_TESTS)' -bench . -benchtime 1x ./$(KUBE_PKG))
	@$(call timed,bench program,$(TESTBUILD) $(BENCH_SMOKE_PROGRAM))
	@$(call timed,bench program: idle runners on two replicas,$(TESTBUILD) $(BENCH_SMOKE_IDLE_REPLICAS))
	@$(call timed,bench program: kube burst,$(TESTBUILD) $(BENCH_SMOKE_KUBE_BURST))
	@$(call timed,bench program: kube log streams,$(TESTBUILD) $(BENCH_SMOKE_KUBE_LOGS))
	@$(call timed,bench program: simulated cluster,$(TESTBUILD) $(BENCH_SMOKE_SCALE))

# Every benchmark once at its smallest, so that one which no longer runs
# fails the tests instead of the next measurement: each go test Benchmark*
# with -benchtime 1x (one package at a time, as the figures are taken), and
# the bench program with tiny sizes (`make test` runs both, the go test
# ones beside the tests). The figures it prints mean nothing (one sample,
# no baseline interleaving).
BENCH_SMOKE_PROGRAM := $(GO) run ./bench -bin $(BIN) -n 1 -log-mb 1 -log-runs 1 -steps 2 -steps-runs 1 -restarts 1 -runners 5 -idle 2s
# The idle runners on two replicas on PostgreSQL (docs/scaling.md "One
# server, many waiting runners"): about 10 s.
BENCH_SMOKE_IDLE_REPLICAS := $(GO) run ./bench -bin $(BIN) -only idle -runners 5 -idle 2s -idle-replicas 2
# The kube burst (bench -only kubeburst, docs/scaling.md "One kube runner,
# many job pods") at two runs and a warm pod: about 10 s on the local cluster.
BENCH_SMOKE_KUBE_BURST := $(GO) run ./bench -bin $(BIN) -only kubeburst -kube-runs 2 -kube-warm 1 -kube-cpus 100m
# Concurrent log streams through a kube runner (bench -only kubelogs,
# docs/scaling.md "Log streams through the API server") at two streams of
# 1 MB/s for 3 s; fails if a line is lost, torn or out of order: about 15 s.
BENCH_SMOKE_KUBE_LOGS := $(GO) run ./bench -bin $(BIN) -only kubelogs -kube-log-streams 2 -kube-log-seconds 3 -kube-log-cpus 100m
# The simulated cluster (bench-scale, docs/scaling.md "A simulated cluster
# of 1,000 nodes") at 10 nodes and 20 runs, with a sweep of 20 orphans:
# 34-47 s (kwok is in the cluster's kube binary, cluster-build).
BENCH_SMOKE_SCALE := $(GO) run ./bench/scale -bin $(BIN) -nodes 10 -runs 20 -matrix 10 -capacity 5 -fill 50 -orphans 20
.PHONY: bench-smoke
bench-smoke: build cluster-up docker-up
	$(TESTBUILD) $(CLUSTER_REQUIRED) $(BROWSER_REQUIRED) $(GO) test -count=1 -p 1 -run '^$$' -bench . -benchtime 1x -timeout 20m ./...
	$(TESTBUILD) $(BENCH_SMOKE_PROGRAM)
	$(TESTBUILD) $(BENCH_SMOKE_IDLE_REPLICAS)
	$(TESTBUILD) $(BENCH_SMOKE_KUBE_BURST)
	$(TESTBUILD) $(BENCH_SMOKE_KUBE_LOGS)
	$(TESTBUILD) $(BENCH_SMOKE_SCALE)

# The kube executor's shared suite (executortest), its secret and
# hardening tests and doctor with every job pod in gVisor: RuntimeClass
# gvisor, which cluster-up creates (test/kubetest first checks that a pod
# of it runs; a missing RuntimeClass, or one whose pods do not start, fails
# them under KNOTLESS_TEST_CLUSTER_REQUIRED=1, set here, and skips them
# without, saying how to get it). About
# 4.5 minutes alone; 5-11 minutes in make test beside the other parts.
GVISOR_TESTS := ^(TestKube|TestKube_GVisorJobPodSeesGVisorsKernelAndKeepsItsHardening|TestKube_SecretReachesTheStepByteExactAndNowhereElse|TestKube_StoredPodHasEveryHardeningField|TestKube_EachRunAsVariantIsApplied|TestKube_RunnerServiceAccountMayOnlyRunPodsInItsNamespace|TestKube_JobImageNeedsOnlyAShell|TestKubeDoctor_PassesEveryCheckInACorrectNamespace)$$
test-gvisor: cluster-up testreport
	$(CLUSTER_REQUIRED) KNOTLESS_TEST_RUNTIME_CLASS=gvisor $(TESTREPORT) -- $(GO) test -count=1 -timeout 20m -run '$(GVISOR_TESTS)' ./internal/executor/kube

test-unit: testreport
	$(TESTREPORT) -- $(GO) test -count=1 -short ./internal/...

# Unit and end-to-end tests, the cluster ones included.
test-e2e: build cluster-up docker-up testreport
	$(CLUSTER_REQUIRED) $(MACHINE_REQUIRED) $(BROWSER_REQUIRED) $(TESTREPORT) -- $(GO) test -count=1 -timeout 25m ./internal/... ./test/...

# The local Kubernetes cluster (test/cluster, its own Go module). It needs
# root; the first build of its binaries takes 14-30 minutes on 2 cores and is
# cached in /var/cache/knotless-test-cluster.
CLUSTER := $(BIN)/knotless-test-cluster

cluster-harness:
	@mkdir -p $(BIN)
	@cd test/cluster && $(GO) build -o $(abspath $(CLUSTER)) ./cmd/cluster

cluster-build: cluster-harness
	$(CLUSTER) build

# The tests' S3 server (versitygw, internal/objstore/s3test), built once
# into ~/.cache/knotless/tools; the tests build it themselves when it is
# missing, this builds it ahead (.ci/run, beside the other builds).
.PHONY: s3-server
s3-server:
	$(GO) run ./internal/objstore/s3test/install

cluster-up: cluster-harness
	$(CLUSTER) up

cluster-down: cluster-harness
	$(CLUSTER) down

cluster-status: cluster-harness
	@$(CLUSTER) status

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./internal/workflow
	$(GO) test -run '^$$' -fuzz FuzzWriter -fuzztime 60s ./internal/logmask

bench: build
	$(GO) run ./bench -bin $(BIN)

# Pod create → Running and exec round trip on the local cluster (client-go,
# as a runner's ServiceAccount), 20 samples each, medians in ms.
bench-cluster: cluster-up
	$(CLUSTER_REQUIRED) $(GO) test -count=1 -run '^$$' -bench 'BareCreateRunning|BareExecTrue' -benchtime 20x ./test/kubetest
	@$(CLUSTER) status

# The kube executor against the bare client-go loop on the same cluster:
# a one-step run claim → finished (server, runner, job pod) against a bare
# run of the same pod, per extra step against a bare exec, a pod's
# lifecycle, copy-in and log throughput (docs/benchmarks.md "Kubernetes executor figures").
bench-kube: build cluster-up
	$(CLUSTER_REQUIRED) $(GO) test -count=1 -run '^$$' -bench KubeClaimToFinished -benchtime 10x ./test/e2e
	$(CLUSTER_REQUIRED) $(GO) test -count=1 -run '^$$' -bench 'Kube_Step' -benchtime 50x ./internal/executor/kube
	$(CLUSTER_REQUIRED) $(GO) test -count=1 -run '^$$' -bench 'Kube_(Lifecycle|CopyIn|Log)' -benchtime 5x ./internal/executor/kube
	$(CLUSTER_REQUIRED) $(GO) test -count=1 -run '^$$' -bench 'Kube_UserNamespace' -benchtime 10x ./internal/executor/kube

# A container build by a builds run's builder (BuildKit in a user
# namespace, not privileged) against a privileged BuildKit on the same
# node, the same Dockerfile with no cache (docs/benchmarks.md "Container
# build figure").
bench-builds: cluster-up
	$(CLUSTER_REQUIRED) $(GO) test -count=1 -run '^$$' -bench 'Kube_ContainerBuild' -benchtime 5x ./internal/executor/kube

# The tests' own Docker engine (root): its own socket, data root, exec root
# and containerd, beside the cluster's (scripts/dockerd.sh), unless an
# engine answers at DOCKER_HOST already.
docker-up:
	@timeout 5 docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || bash scripts/dockerd.sh up

docker-down:
	@bash scripts/dockerd.sh down

# The docker executor against the bare SDK loop on the same engine, in one
# run: per extra step (50 steps of true) against one bare exec, a one-step
# run against create, start, one exec, remove, and the same run through
# server and runner, claim to finished (docs/benchmarks.md "Docker executor figures").
bench-docker: docker-up
	$(CLUSTER_REQUIRED) $(GO) test -count=1 -run '^$$' -bench 'Docker_' -benchtime 10x ./internal/executor/docker
	$(CLUSTER_REQUIRED) $(GO) test -count=1 -run '^$$' -bench DockerClaimToFinished -benchtime 10x ./test/e2e

# A 4-way matrix plus a run needing it on kube, push to last end, against
# the same runs by hand one after another (docs/benchmarks.md "Pipeline
# graph figure"); -benchtime 1x with the default step (sleep 0) is the tiny
# form CI can afford.
.PHONY: bench-pipeline
bench-pipeline: build cluster-up
	$(CLUSTER_REQUIRED) $(GO) test -count=1 -run '^$$' -bench KubePipelineGraphOverhead -benchtime 3x ./test/e2e

clean:
	rm -rf $(BIN) $(DIST) .demo

# The runner in a cluster (deploy/kubernetes, docs/kubernetes.md): the
# manifests' init container checks knotless-run and knotless-agent (for
# linux/amd64 and linux/arm64) against SHA-256 digests written in
# deploy/kubernetes/base/deployment.yaml. After a change to the code or
# VERSION, rebuild them reproducibly and write the new digests (a test
# fails while they are stale). runner-image is the optional image with
# this machine's knotless-run and both agents in it, a docker archive for
# `docker load` or `ctr -n k8s.io images import`.
deploy-digests:
	$(TESTBUILD) $(GO) run ./scripts/deploy digests

deploy-digests-check:
	$(TESTBUILD) $(GO) run ./scripts/deploy digests -check

# The builder image of container builds (docs/container-builds.md): this
# checkout's knotless-builder with BuildKit's buildkitd and buildctl and runc,
# which the local cluster's harness builds from their Go modules (cached in
# /var/cache/knotless-test-cluster; runc needs gcc, libseccomp-dev and
# pkg-config), as $(BIN)/knotless-builder-image.tar, its name printed.
builder-image: cluster-harness
	$(CLUSTER) build --only buildkitd,buildctl,runc --copy-to $(BIN)/builder-programs
	$(TESTBUILD) $(GO) run ./scripts/deploy builder-image -bin $(BIN)/builder-programs -o $(BIN)/knotless-builder-image.tar

runner-image:
	@mkdir -p $(BIN)
	$(TESTBUILD) $(GO) run ./scripts/deploy image -o $(BIN)/knotless-runner-image.tar -ref localhost/knotless/runner:$(VERSION)

# From the first command of the runner's deployment to its session with
# the server, 5 samples, median in ms (docs/kubernetes.md "The kube executor").
bench-deploy: cluster-up
	$(CLUSTER_REQUIRED) $(GO) test -count=1 -run '^$$' -bench Deploy_ApplyToRunnerSession -benchtime 5x ./test/e2e

# A restart of the runner deployed in the local cluster under a run: from
# the runner pod's deletion to its successor streaming the in-flight step
# again, 5 times, median in ms (docs/benchmarks.md "Kubernetes restart figure").
.PHONY: bench-restart
bench-restart: build cluster-up
	$(CLUSTER_REQUIRED) $(GO) test -count=1 -run '^$$' -bench RunnerPodDeletedToStreamingAgain -benchtime 5x -timeout 30m -v ./test/e2e

# The scale benchmarks of docs/scaling.md, each at its documented size;
# the FLAGS variables size them (`make test` runs each tiny).
# Idle runners long-polling one server on SQLite, or with
# BENCH_IDLE_FLAGS='-runners 10000 -idle-replicas 2' two replicas on
# PostgreSQL ("One server, many waiting runners"; the runners dial from
# 127.0.0.2 upwards).
BENCH_IDLE_FLAGS ?= -runners 10000 -idle 30s
.PHONY: bench-idle bench-kube-burst bench-kube-logs
bench-idle: build
	$(GO) run ./bench -bin $(BIN) -only idle $(BENCH_IDLE_FLAGS)
# One kube runner, 100 runs at once, cold and with a warm pool of 10, with
# the floor (bare client-go, the same pods) in the same invocation ("One
# kube runner, many job pods").
BENCH_KUBE_BURST_FLAGS ?= -kube-runs 100 -kube-warm 10 -kube-cpus 10m -kube-memory 64Mi -kube-disk 64Mi
bench-kube-burst: build cluster-up
	$(CLUSTER_REQUIRED) $(GO) run ./bench -bin $(BIN) -only kubeburst $(BENCH_KUBE_BURST_FLAGS)
# Concurrent 1 MB/s log streams through a kube runner, beside a bare exec
# and a pod dialling this machine ("Log streams through the API server").
BENCH_KUBE_LOGS_FLAGS ?= -kube-log-streams 25 -kube-log-seconds 20 -kube-log-cpus 50m
bench-kube-logs: build cluster-up
	$(CLUSTER_REQUIRED) $(GO) run ./bench -bin $(BIN) -only kubelogs $(BENCH_KUBE_LOGS_FLAGS)

# Kube runners against a simulated cluster of 1,000 nodes through 5,000
# runs (test/kwok, bench/scale): kwok (built into the local cluster's
# multi-call kube binary, cluster-build) fakes the nodes of a throwaway control plane of
# its own, never the local cluster's, and the real step agent serves each
# pod (docs/scaling.md "A simulated cluster of 1,000 nodes"). Needs root and
# the local cluster's kube binary (cluster-build), not the cluster running.
# BENCH_SCALE_FLAGS sizes it (e.g. -nodes 10 -runs 20 -matrix 10 -capacity 5
# -fill 50 -orphans 20, about 40 s; the defaults take an hour or more).
.PHONY: bench-scale
bench-scale: build cluster-build
	$(GO) run ./bench/scale -bin $(BIN) $(BENCH_SCALE_FLAGS)
