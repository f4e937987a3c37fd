#!/usr/bin/env bash
# Builds the CNCF distribution registry (cmd/registry) from its Go module into ~/.cache/kubepool/registry; prints
# the bin dir. The release tests (tests/release) push `make release` to it and the real nodes pull from it.
set -euo pipefail
REGISTRY_VERSION=${REGISTRY_VERSION:-v3.1.2}
# shellcheck source=gobuild.sh
source "$(dirname "$0")/gobuild.sh"
gobuild registry "github.com/distribution/distribution/v3/cmd/registry@${REGISTRY_VERSION}" \
  "-s -w -X github.com/distribution/distribution/v3/version.version=${REGISTRY_VERSION}"
