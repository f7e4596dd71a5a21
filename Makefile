# bulkd: `make run` serves the API locally, `make test` runs every test.
SHELL := /usr/bin/env bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
FUZZTIME ?= 20s
BENCHTIME ?= 1s

.PHONY: all build run test test-race bench lint fmt vet fuzz generate manifests deps clean help

all: build

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

deps: ## install what tests and `run` need (redis-server, spamassassin and spamd, chromium, and the real-MTA world's postfix, exim4, postgrey, dnsmasq from Debian)
	@hack/ensure-redis.sh
	@hack/ensure-spamd.sh
	@hack/ensure-chromium.sh
	@# The real-MTA world (internal/mtaworld, docs/mta-world.md) needs root; without it its test skips.
	@if [ "$$(id -u)" = "0" ]; then hack/ensure-mta.sh >/dev/null; else echo "not root: skipping hack/ensure-mta.sh (the real-MTA world test will skip)" >&2; fi

build: ## build bin/bulkd and bin/bulkctl
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/bulkd ./cmd/bulkd
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/bulkctl ./cmd/bulkctl

run: build ## serve on 127.0.0.1:8080 with a private Redis and a demo account
	hack/run-local.sh

# envtest needs kube-apiserver and etcd: hack/envtest.sh builds them from the
# Go module proxy once and caches them outside the repository.
# The packages whose Redis scripts and keys must work on Redis Cluster run a
# second time against a real three-master cluster the tests start
# (internal/testredis, BULKD_TEST_REDIS=cluster).
CLUSTER_TEST_PKGS := ./internal/accounts/ ./internal/billing/ ./internal/company/ ./internal/jobs/ ./internal/dashboard/users/ ./internal/webhook/ ./internal/ratelimit/ ./internal/idempotency/ ./internal/verify/ ./internal/verify/lists/

test: deps ## run all tests (each starts its own redis-server on a free loopback port; envtest for the controller), then the Redis-facing packages on a 3-master Redis Cluster
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" $(GO) test -count=1 ./...
	BULKD_TEST_REDIS=cluster $(GO) test -count=1 $(CLUSTER_TEST_PKGS)

test-race: deps ## all tests under the race detector
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" $(GO) test -count=1 -race ./...

bench: deps build ## benchmarks and load scripts; numbers go to docs/benchmarks.md
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" $(GO) test -run='^$$' -bench=. -benchtime=$(BENCHTIME) -benchmem ./...
	$(GO) build -o bin/loadgen ./hack/loadgen
	bin/loadgen credits --bin bin/bulkd
	bin/loadgen company --bin bin/bulkd
	bin/loadgen verify --bin bin/bulkd
	bin/loadgen lookup --bin bin/bulkd
	@# Issue 20's speed targets (docs/benchmarks.md, "Verification speed"): bulkd serve with its
	@# defaults, 20,000 addresses / 4,000 people over 1,000 domains at 50 ms, with drop-after-K
	@# servers and a blocking server; first pass and sessions per server against the cap.
	bin/loadgen verify --bin bin/bulkd --domains 1000 --per-domain 20 --drops 40 --blocked 10 --shared 100 --retry-delays 16s,30s --rounds 1 --big 0 --target 1500
	bin/loadgen lookup --bin bin/bulkd --domains 1000 --per-domain 4 --drops 40 --blocked 10 --shared 100 --retry-delays 16s,30s --rounds 1 --submit-rows 0 --target 500
	bin/loadgen spam --bin bin/bulkd
	@# Issue 25: the verifier on stock Postfix/postgrey/Exim (internal/mtaworld, docs/mta-world.md), 476 addresses,
	@# then the same world without the slow server (the first pass may take at most 1.5x as long with it).
	set -o pipefail; BULKD_MTA_WORLD=2 $(GO) test -count=1 -timeout 15m -v -run '^TestAccuracyMTAWorld$$' ./internal/verification/ | grep -E 'attempt|addresses:|^ +\||^(ok|FAIL|---)'
	set -o pipefail; BULKD_MTA_WORLD=2,noslow $(GO) test -count=1 -timeout 15m -v -run '^TestAccuracyMTAWorld$$' ./internal/verification/ | grep -E 'attempt|addresses:|^ +\||^(ok|FAIL|---)'

# The scale bench of Kubernetes mode (issue 27; hack/kube-bench, docs/benchmarks.md "Kubernetes
# at scale"): envtest's kube-apiserver and etcd, kube-controller-manager's Job controller and
# kube-scheduler, KWOK running 1,000 fake nodes, the real `bulkd controller` with its admission,
# 5,000 BulkJobs from 500 accounts, then one account's 1,000 and another's one. All binaries are
# built from the Go module proxy into the tools cache. Not in `make test` nor CI: it takes tens of
# minutes on 2 cores (22 on an idle 2-core machine since the places fix, 44 before). Smaller: make bench-kube BENCH_KUBE_ARGS='--nodes 300 --bulkjobs 1000 --accounts 100 --burst 200'
# (about 4 minutes idle); --admission-only runs no Job controller (Jobs make no pods): the
# controller's admission alone. BULKD_CONCURRENCY=16 (and any BULKD_*) reaches the controller.
BENCH_KUBE_ARGS ?=
.PHONY: bench-kube
bench-kube: deps build ## scale bench on KWOK: 1,000 fake nodes, 5,000 BulkJobs, the real controller (prints the figures)
	$(GO) run ./hack/kube-bench --bin bin/bulkd --assets "$$(hack/envtest.sh)" \
		--cluster-bins "$$(hack/local-cluster/build-k8s.sh)" --kwok "$$(hack/tools.sh kwok)" $(BENCH_KUBE_ARGS)

# The load and fault suite (test/soak, docs/reliability.md): two `bulkd serve`
# replicas on one redis-server with its append-only file, 200 API keys at
# their 20 requests/s for SOAK_DURATION, kill -9 of a replica and of the
# replica holding the most shard leases, a Redis restart; then every job,
# row, charge and ledger is checked. A 25-second version runs in `make test`.
SOAK_DURATION ?= 5m
.PHONY: soak
soak: deps build ## load and fault suite: 200 keys at 20 req/s for 5 min, kill -9 and Redis restart (report: var/soak/report.md)
	@mkdir -p var/soak
	$(GO) test -count=1 -timeout 40m -v -run '^TestSoak$$' ./test/soak/ -args -soak -soak.duration $(SOAK_DURATION) \
		-soak.bin $(CURDIR)/bin/bulkd -soak.dir $(CURDIR)/var/soak -soak.report $(CURDIR)/var/soak/report.md

fuzz: ## run every fuzzer for FUZZTIME each
	@hack/fuzz-all.sh $(FUZZTIME)

lint: fmt vet ## gofmt + go vet

fmt:
	@out=$$(find . -name '*.go' -not -path './vendor/*' -not -path './var/*' -print0 | xargs -0 gofmt -l); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

generate: ## controller-gen object code (zz_generated.deepcopy.go) for api/ types
	$$(hack/tools.sh controller-gen) object paths=./api/...

manifests: ## CRDs and RBAC from kubebuilder markers into config/ (and the chart's crds/)
	$$(hack/tools.sh controller-gen) crd rbac:roleName=bulkd-controller paths=./api/... paths=./controllers/... \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	@if [ -d charts/bulkd ]; then mkdir -p charts/bulkd/crds && cp config/crd/bases/*.yaml charts/bulkd/crds/; fi

clean:
	rm -rf bin

# Container image without a Docker daemon (hack/image, go-containerregistry):
# bin/bulkd-image.tar is both an OCI layout archive and a `docker save`
# archive (docker/podman load, kind load image-archive, ctr images import);
# bin/bulkd-oci/ is the same image as an OCI layout directory. Tags: the
# chart's appVersion (the chart's default image), $(VERSION) and latest.
IMAGE_REPO ?= localhost/bulkd
IMAGE_TAG ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' charts/bulkd/Chart.yaml)
.PHONY: image helm-lint chart-test
image: build ## container image as bin/bulkd-image.tar (+ bin/bulkd-oci/), no Docker needed
	$(GO) run ./hack/image --binary bin/bulkd --repository $(IMAGE_REPO) --tag $(IMAGE_TAG) --tag $(VERSION) --tag latest \
		--version $(VERSION) --commit $(COMMIT) --tar bin/bulkd-image.tar --layout bin/bulkd-oci

# helm lint (helm's Go library) + render of charts/bulkd and the kustomize
# config/ with server-side dry-run against envtest; also part of `make test`.
chart-test: ## helm lint + render the chart and config/, server-side dry-run against envtest
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" $(GO) test -count=1 ./test/chart/
helm-lint: chart-test ## same as chart-test (the lint is one of its tests)

# A real single-node cluster (hack/local-cluster: k8s built from the Go module
# proxy, containerd/runc from Debian, everything in its own network namespace),
# helm install of charts/bulkd with the local image, test/cluster, teardown.
.PHONY: e2e
e2e: ## end-to-end on a real local Kubernetes cluster (root; docs/e2e.md)
	hack/local-cluster/e2e.sh
