# Taskgate — run `make help` for the targets.
GO       ?= go
PKGS     ?= ./...
TESTFLAGS ?= -count=1 -timeout 25m

.PHONY: help run test generate verify lint bench fuzz soak

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

run: ## run the console on embedded defaults (private PostgreSQL, demo receiver, demo policy)
	$(GO) run ./cmd/console

test: ## run every test (installs missing PostgreSQL, Chromium and Node as root)
	./scripts/test-deps
	$(GO) test $(TESTFLAGS) $(PKGS)

generate: ## regenerate templ views
	$(GO) tool templ generate -path web

verify: generate ## regenerate and fail on a diff; gofmt; go vet
	@git diff --exit-code -- '*_templ.go' || (echo "generated templ code is stale: run make generate and commit" && exit 1)
	@test -z "$$(git ls-files --others --exclude-standard -- '*_templ.go')" || (echo "untracked generated templ code: commit it" && exit 1)
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '_templ.go$$')); test -z "$$out" || (echo "not gofmt'd: $$out" && exit 1)
	$(GO) vet $(PKGS)

# golangci-lint v2, fetched through the Go module proxy at a fixed version (configuration and the
# reason for every rule turned off: .golangci.yml).
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0

lint: ## static checks: go vet, gofmt and golangci-lint (gosec, staticcheck, errcheck, bodyclose, sqlclosecheck, noctx, errorlint)
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '_templ.go$$')); test -z "$$out" || (echo "not gofmt'd: $$out" && exit 1)
	$(GOLANGCI_LINT) run $(PKGS)

bench: ## run the benchmark program against a private PostgreSQL and the reference receiver (BENCH=quick: 100,000 operations); writes bench.json
	BENCH=$(BENCH) $(GO) run ./cmd/bench -out bench.json
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

fuzz: ## run every fuzz target for FUZZTIME (default 60s) each
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $${FUZZTIME:-60s} $$pkg || exit 1; \
	  done; \
	done

soak: ## crash soak: three replicas killed at random, the receiver restarted, PostgreSQL stopped; checks and a summary line (SOAK=1m; default 10m)
	$(GO) run ./cmd/soak -duration $(or $(SOAK),10m)
