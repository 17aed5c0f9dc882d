# Knotless. `make demo` runs this repository's own pipeline through a real
# server and runner; `make test` runs every test. See README.md.

GO      ?= go
BIN     ?= bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X knotless.dev/knotless/internal/version.Version=$(VERSION)
PROGRAMS := knotless knotless-server knotless-run

.PHONY: all build demo test test-unit test-e2e vet fuzz bench clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ $(addprefix ./cmd/,$(PROGRAMS))

demo: build
	@bash scripts/demo.sh

vet:
	$(GO) vet ./...

# Every test: unit, integration (real server, git, processes) and end to end
# (the built programs as processes).
test: vet
	$(GO) test -count=1 -timeout 20m ./...

test-unit:
	$(GO) test -count=1 -short ./internal/...

test-e2e: build
	$(GO) test -count=1 -timeout 20m ./test/...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./internal/workflow
	$(GO) test -run '^$$' -fuzz FuzzWriter -fuzztime 60s ./internal/logmask

bench: build
	$(GO) run ./bench -bin $(BIN)

clean:
	rm -rf $(BIN) .demo
