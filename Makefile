# Taskgate — run `make help` for the targets.
GO       ?= go
# The build's Go: 1.27.3, which the go command takes from the Go module proxy on first use (about
# 76 MB, once per machine). It carries the standard library's fixes that make vuln checks for;
# the code also builds on Go 1.26 (go.mod's minimum). make GOTOOLCHAIN=local uses the machine's Go.
export GOTOOLCHAIN := go1.27.3
PKGS     ?= ./...
TESTFLAGS ?= -count=1 -timeout 25m

.PHONY: help run test generate verify lint vuln bench fuzz soak

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

run: ## run the console on embedded defaults (private PostgreSQL, demo receiver, demo policy)
	$(GO) run ./cmd/console

test: ## run every test (installs missing PostgreSQL, Chromium and Node as root)
	./scripts/test-deps
	$(GO) test $(TESTFLAGS) $(PKGS)

generate: ## regenerate templ views
	$(GO) tool templ generate -path web

verify: generate ## regenerate and fail on a diff; gofmt; go vet; go.mod tidy
	@$(GO) mod tidy -diff >/dev/null || (echo "go.mod or go.sum is not tidy: run go mod tidy and commit" && $(GO) mod tidy -diff; exit 1)
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

# govulncheck with the Go vulnerability database as the golang.org/x/vulndb module (its OSV
# files) from the Go module proxy, indexed here by the database's own indexdb, so the scan needs
# no other host. A called vulnerability fails unless .govulncheck-accepted names it with why.
VULNDB_VERSION ?= v0.0.0-20261105234957-e22db6528018
VULNDB_DIR     ?= $(CURDIR)/.taskgate/vulndb-$(VULNDB_VERSION)
GOVULNCHECK    ?= $(GO) run golang.org/x/vuln/cmd/govulncheck@v1.9.0

vuln: ## govulncheck against the vulnerability database module; fails on a called vulnerability not accepted in .govulncheck-accepted
	@test -f $(VULNDB_DIR)/index/db.json || { \
	  src=$$(GOFLAGS=-mod=mod $(GO) mod download -json golang.org/x/vulndb@$(VULNDB_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	  test -d "$$src/data/osv" || { echo "golang.org/x/vulndb@$(VULNDB_VERSION) has no data/osv"; exit 1; }; \
	  GOFLAGS=-mod=mod $(GO) run golang.org/x/vulndb/cmd/indexdb@$(VULNDB_VERSION) -vulns "$$src/data/osv" -out $(VULNDB_DIR); }
	$(GOVULNCHECK) -db file://$(VULNDB_DIR) -format json $(PKGS) > $(VULNDB_DIR).scan.json
	$(GO) run ./scripts/vulncheck -accept .govulncheck-accepted < $(VULNDB_DIR).scan.json

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
