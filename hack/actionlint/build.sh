#!/usr/bin/env bash
# Builds actionlint (the GitHub Actions workflow linter) from its Go module into ~/.cache/kubepool/actionlint;
# prints the bin dir. tests/release/test_workflow.py lints .github/workflows with it.
set -euo pipefail
ACTIONLINT_VERSION=${ACTIONLINT_VERSION:-v1.7.12}
# shellcheck source=../registry/gobuild.sh
source "$(dirname "$0")/../registry/gobuild.sh"
gobuild actionlint "github.com/rhysd/actionlint/cmd/actionlint@${ACTIONLINT_VERSION}" \
  "-s -w -X github.com/rhysd/actionlint.version=${ACTIONLINT_VERSION}"
