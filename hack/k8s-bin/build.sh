#!/usr/bin/env bash
# The build of the local cluster's Kubernetes binaries lives in the package (src/kubepool/local/k8sbin/), so
# `kubepool local up` finds it after a `pip install` too; this path stays for make, CI and the docs.
exec "$(cd "$(dirname "$0")/../.." && pwd)/src/kubepool/local/k8sbin/build.sh" "$@"
