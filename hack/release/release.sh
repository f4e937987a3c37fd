#!/usr/bin/env bash
# make release REGISTRY=host[:port]/path: the release's one version (pyproject.toml's), built and published.
#   images  operator and runtime (hack/images/build.sh), stamped with OCI labels and annotations (source,
#           revision, version) and pushed as $REGISTRY/operator:$VERSION and $REGISTRY/runtime:$VERSION
#   chart   `helm package` + `helm push` to oci://$REGISTRY/charts/kubepool, version $VERSION
#   python  wheel and sdist in dist/ (`python -m build`, `twine check`); the CI workflow uploads them. The
#           rest (digests, the chart package, the build log) goes to dist/release/.
# No Docker engine: buildah pushes the images, helm the chart. Env: REGISTRY_CA (a CA file the registry's
# certificate is signed by), REGISTRY_USER/REGISTRY_PASSWORD (a login, both tools), RUNTIME_IMAGE (runtime:
# which build of hack/images/build.sh is published as runtime; the real-node tier publishes runtime-lean),
# REVISION (git HEAD), SOURCE (the project's public home), PYTHON (python3), HELM (the project's helm).
set -Eeuo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
T0=$SECONDS
step() { printf '[release %4ds] %s\n' $((SECONDS - T0)) "$*"; }
die() { printf '[release] error: %s\n' "$*" >&2; exit 2; }

REGISTRY=${REGISTRY:-}
[[ $REGISTRY =~ ^[A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+$ ]] ||
    die "REGISTRY=host[:port]/path is required (e.g. ghcr.io/kubepool), got '${REGISTRY}'"
PYTHON=${PYTHON:-python3}
RUNTIME_IMAGE=${RUNTIME_IMAGE:-runtime}
[[ $RUNTIME_IMAGE == runtime || $RUNTIME_IMAGE == runtime-lean ]] || die "RUNTIME_IMAGE is runtime or runtime-lean"
SOURCE=${SOURCE:-https://github.com/kubepool/kubepool}
REVISION=${REVISION:-$(git rev-parse HEAD)}
HELM=${HELM:-$(hack/k8s-bin/build.sh)/helm}

# --- the one version ---------------------------------------------------------------------------------------
VERSION=$("$PYTHON" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
read -r chart_version app_version < <("$PYTHON" -c '
import yaml; c = yaml.safe_load(open("charts/kubepool/Chart.yaml")); print(c["version"], c["appVersion"])')
[[ $chart_version == "$VERSION" && $app_version == "$VERSION" ]] ||
    die "Chart.yaml (version $chart_version, appVersion $app_version) differs from pyproject.toml's $VERSION"
step "kubepool $VERSION (revision $REVISION) to $REGISTRY"

ca_args_helm=() cert_dir=""
if [[ -n ${REGISTRY_CA:-} ]]; then
    [[ -f $REGISTRY_CA ]] || die "REGISTRY_CA=$REGISTRY_CA is not a file"
    ca_args_helm=(--ca-file "$REGISTRY_CA")
    cert_dir=$(mktemp -d)  # buildah reads every *.crt of a directory
    cp "$REGISTRY_CA" "$cert_dir/ca.crt"
fi
host=${REGISTRY%%/*}

# --- python: wheel and sdist ---------------------------------------------------------------------------------
step "wheel and sdist (python -m build; twine check)"
rm -rf dist && mkdir -p dist/release
"$PYTHON" -m build --outdir dist . >dist/release/build.log 2>&1 || { tail -n 30 dist/release/build.log >&2; die "python -m build failed"; }
"$PYTHON" -m twine check --strict dist/kubepool-"$VERSION"-*.whl dist/kubepool-"$VERSION".tar.gz

# --- images --------------------------------------------------------------------------------------------------
step "images: operator $RUNTIME_IMAGE (hack/images/build.sh; cached when unchanged)"
IMAGE_TAG=dev hack/images/build.sh operator "$RUNTIME_IMAGE"
CACHE=${KUBEPOOL_IMAGES_CACHE:-$HOME/.cache/kubepool/images}
# The build's own storage (hack/images/build.sh), under its lock: another build run must not touch it meanwhile.
exec 8>"$CACHE/.build.lock"
flock 8
export CONTAINERS_STORAGE_CONF="$CACHE/storage.conf"
export TMPDIR="$CACHE/tmp-buildah"
mkdir -p "$TMPDIR"
if [[ -n ${REGISTRY_PASSWORD:-} ]]; then
    printf '%s' "$REGISTRY_PASSWORD" | buildah login -u "${REGISTRY_USER:?REGISTRY_USER goes with REGISTRY_PASSWORD}" \
        --password-stdin ${cert_dir:+--cert-dir "$cert_dir"} "$host"
    printf '%s' "$REGISTRY_PASSWORD" | "$HELM" registry login -u "$REGISTRY_USER" --password-stdin "${ca_args_helm[@]}" "$host"
fi
publish() {  # BUILT-REF NAME: stamp the release's labels and annotations on a copy, push it as NAME:VERSION
    local built=$1 name=$2 ctr ref meta=()
    ref="localhost/kubepool/release/$name:$VERSION"
    for kv in "org.opencontainers.image.source=$SOURCE" "org.opencontainers.image.revision=$REVISION" \
        "org.opencontainers.image.version=$VERSION"; do
        meta+=(--label "$kv" --annotation "$kv")
    done
    ctr=$(buildah from --pull-never "$built")
    buildah config "${meta[@]}" "$ctr"
    buildah commit -q --format oci --rm "$ctr" "$ref" >/dev/null
    step "push $REGISTRY/$name:$VERSION"
    buildah push -q ${cert_dir:+--cert-dir "$cert_dir"} --digestfile "dist/release/$name.digest" "$ref" "docker://$REGISTRY/$name:$VERSION"
    buildah rmi "$ref" >/dev/null 2>&1 || true
}
publish "localhost/kubepool/operator:dev" operator
if [[ $RUNTIME_IMAGE == runtime-lean ]]; then
    publish "localhost/kubepool/runtime:dev-lean" runtime
else
    publish "localhost/kubepool/runtime:dev" runtime
fi

# --- chart ---------------------------------------------------------------------------------------------------
step "chart: helm package + helm push oci://$REGISTRY/charts"
"$HELM" package charts/kubepool --version "$VERSION" --app-version "$VERSION" -d dist/release >/dev/null
"$HELM" push "dist/release/kubepool-$VERSION.tgz" "oci://$REGISTRY/charts" "${ca_args_helm[@]}"
[[ -z $cert_dir ]] || rm -rf "$cert_dir"
step "done: $REGISTRY/operator:$VERSION $REGISTRY/runtime:$VERSION oci://$REGISTRY/charts/kubepool:$VERSION dist/"
