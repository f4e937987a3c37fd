#!/usr/bin/env bash
# Builds kubepool's container images without a Docker engine (see docs/images.md):
#   hack/images/build.sh [operator] [runtime] [runtime-cuda] [runtime-lean] [runtime-marked]   (default: operator runtime)
# The base is a Debian rootfs from mmdebstrap, packed as an OCI layout; buildah builds the project's own
# Dockerfiles FROM it (chroot isolation, host network) with the host's pip cache mounted; each image is
# written as an OCI archive under $KUBEPOOL_IMAGES_CACHE with its digest. An image whose inputs (Dockerfile,
# the files it copies, build args, base, the build commands) did not change since its archive was written is skipped.
# Env: KUBEPOOL_IMAGES_CACHE (~/.cache/kubepool/images), IMAGE_TAG (dev), FORCE=1 (ignore the input hashes),
#      DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR, TORCH_INDEX_URL (an extra index for torch; PyPI by default).
set -Eeuo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$REPO/hack/images"
CACHE=${KUBEPOOL_IMAGES_CACHE:-$HOME/.cache/kubepool/images}
HOST_PIP_CACHE=${HOST_PIP_CACHE:-$HOME/.cache/pip}
TAG=${IMAGE_TAG:-dev}
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# The PyTorch CPU index is not reachable everywhere; PyPI as the "extra" index is a no-op. Where the CPU
# index is reachable, TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu gives the CPU image CPU torch.
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://pypi.org/simple}
# What the Dockerfiles expect of python:3.11-slim: python, venv with pip, CA certificates.
BASE_PACKAGES=python3,python3-venv,python-is-python3,ca-certificates
# command:package; umoci and runc are for the smoke test (tests/images).
TOOLS=(buildah:buildah mmdebstrap:mmdebstrap umoci:umoci runc:runc python3:python3
    /etc/ssl/certs/ca-certificates.crt:ca-certificates)

T0=$SECONDS
LOGS="$CACHE/logs"
mkdir -p "$CACHE" "$LOGS" "$HOST_PIP_CACHE"

step() { printf '[images %4ds] %s\n' $((SECONDS - T0)) "$*"; }
# A command outside run() that fails still says which one.
trap 'printf "[images %4ds] FAILED (exit %d) at hack/images/build.sh:%d: %s\n" $((SECONDS - T0)) $? $LINENO "$BASH_COMMAND" >&2' ERR

# run LOGNAME CMD...: the command's output goes to $LOGS/LOGNAME.log; on failure, say which command failed
# and show the log's last lines.
run() {
    local log="$LOGS/$1.log"
    shift
    local rc=0 try
    for try in 1 2 3; do
        rc=0
        "$@" >"$log" 2>&1 || rc=$?
        # buildah's chroot isolation re-executes a sealed in-memory copy of itself for each RUN step; under heavy
        # I/O (the test suite beside it) sealing can fail with EBUSY. Transient: the same step passes when run
        # again, and --layers resumes after the steps already built.
        [[ $rc != 0 ]] && grep -q "sealing memfd copy" "$log" && [[ $try -lt 3 ]] || break
        printf '[images %4ds] %s: sealing buildah'"'"'s re-exec copy failed (EBUSY, transient under load); try %d of 3\n' \
            $((SECONDS - T0)) "$*" $((try + 1)) >&2
        sleep 5
    done
    if [[ $rc != 0 ]]; then
        printf '[images %4ds] FAILED (exit %d): %s\n' $((SECONDS - T0)) "$rc" "$*" >&2
        printf '  last lines of %s:\n' "$log" >&2
        tail -n 40 "$log" | sed 's/^/  | /' >&2
        exit 1
    fi
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(operator runtime)
for t in "${targets[@]}"; do
    case $t in
    operator | runtime | runtime-cuda | runtime-lean | runtime-marked) ;;
    *) echo "unknown image: $t (operator, runtime, runtime-cuda, runtime-lean, runtime-marked)" >&2; exit 2 ;;
    esac
done

# --- tools (a fresh machine has none of them) ---------------------------------------------------------------
missing=()
for tool in "${TOOLS[@]}"; do
    [[ -e ${tool%%:*} ]] || command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    [[ $(id -u) == 0 ]] || { echo "installing ${missing[*]} needs root (apt-get)" >&2; exit 1; }
    step "apt-get install ${missing[*]}"
    run apt-update apt-get update
    run apt-install env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi
[[ $(id -u) == 0 ]] || { echo "buildah --isolation chroot and mmdebstrap need root here" >&2; exit 1; }

# One build at a time per cache: buildah's storage, the wheelhouse and TMPDIR below are shared, and a second
# run (make test's real-node preparation beside make release) would empty TMPDIR under the first one's push.
exec 8>"$CACHE/.build.lock"
if ! flock -n 8; then
    step "another hack/images/build.sh is using $CACHE; waiting for it"
    flock 8
fi

# buildah's storage is the project's own (overlay on the cache dir), apart from any other user of buildah.
mkdir -p "$CACHE/storage" "$CACHE/run"
cat >"$CACHE/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$CACHE/storage"
runroot = "$CACHE/run"
EOF
export CONTAINERS_STORAGE_CONF="$CACHE/storage.conf"
# buildah push stages each layer, uncompressed, in TMPDIR (the runtime's is GBs): keep it in the cache too.
export TMPDIR="$CACHE/tmp-buildah"
rm -rf "$TMPDIR" && mkdir -p "$TMPDIR"

# pip inside the builds is set up by files mounted for the build only, not by the Dockerfiles: a pip.conf
# naming the host's CA bundle (HTTPS may be intercepted) and the wheelhouse. The wheelhouse step downloads
# every wheel once; the builds then install from it only (no-index: pip 23 prefers the index's copy of a
# wheel to a local one). The host's pip cache is mounted as well, but a proxy that strips Cache-Control leaves
# pip's HTTP cache empty. All of it is mounted over /root, which the base has: buildah leaves an empty file or
# directory in the image for a mount target that did not exist, here they land in $CACHE/home-*.
WHEELS="$CACHE/wheels"
HOST_CA=/etc/ssl/certs/ca-certificates.crt
for home in home-build home-download; do
    mkdir -p "$CACHE/$home/.config/pip" "$WHEELS"
    printf '[global]\ncert = /root/build-ca.crt\nfind-links = /root/wheels\ndisable-pip-version-check = true\n%s' \
        "$([[ $home == home-build ]] && echo 'no-index = true')" >"$CACHE/$home/.config/pip/pip.conf"
done
mounts() {  # HOME-DIR: the build mounts
    printf '%s\n' -v "$CACHE/$1:/root" -v "$HOST_PIP_CACHE:/root/.cache/pip" -v "$WHEELS:/root/wheels" \
        -v "$HOST_CA:/root/build-ca.crt:ro"
}
mapfile -t BUILD_MOUNTS < <(mounts home-build)
mapfile -t DOWNLOAD_MOUNTS < <(mounts home-download)
# Working containers an interrupted run left behind (this storage is the script's own).
buildah rm --all >/dev/null 2>&1 || true

hash_of() { sha256sum | cut -c1-16; }

# --- base: a Debian rootfs as an OCI layout ----------------------------------------------------------------
BASE_KEY=$(printf '%s\n' "$SUITE" "$MIRROR" "$SECURITY_MIRROR" "$BASE_PACKAGES" "$(cat "$HERE/oci_base.py")" | hash_of)
BASE_TAG="$SUITE-$BASE_KEY"
BASE_LAYOUT="$CACHE/base"
BASE_REF="localhost/kubepool/base:$BASE_TAG"
if grep -q "\"$BASE_TAG\"" "$BASE_LAYOUT/index.json" 2>/dev/null; then
    step "base $BASE_TAG: cached"
else
    step "base $BASE_TAG: mmdebstrap --variant=minbase $SUITE + $BASE_PACKAGES"
    rm -rf "$BASE_LAYOUT" "$CACHE/tmp"
    mkdir -p "$CACHE/tmp"
    run mmdebstrap mmdebstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$CACHE/tmp/rootfs.tar" \
        "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" "deb $SECURITY_MIRROR $SUITE-security main"
    step "base: packing the rootfs as an OCI layout"
    run oci-base python3 "$HERE/oci_base.py" "$CACHE/tmp/rootfs.tar" "$BASE_LAYOUT" "$BASE_TAG" \
        "mmdebstrap --variant=minbase --include=$BASE_PACKAGES $SUITE"
    rm -rf "$CACHE/tmp"
fi
if ! buildah inspect --type image "$BASE_REF" >/dev/null 2>&1; then
    step "base: buildah pull into the build storage as $BASE_REF"
    # A relative oci: path: buildah 1.28 names an image after its layout path, and ".cache" is no valid name.
    base_id=$(cd "$CACHE" && buildah pull -q "oci:base:$BASE_TAG" 2>"$LOGS/base-pull.log") ||
        { echo "FAILED: buildah pull oci:base:$BASE_TAG (in $CACHE)" >&2; tail -n 20 "$LOGS/base-pull.log" >&2; exit 1; }
    run base-tag buildah tag "$base_id" "$BASE_REF"
    buildah rmi localhost/base:latest >/dev/null 2>&1 || true
fi

# --- wheelhouse: every wheel the images install, downloaded once by the base's own pip ------------------------
# runtime-lean alone needs no torch, whose wheels (with CUDA's) are most of the download: without runtime or
# runtime-cuda among the targets, the runtime's requirements are downloaded without it. A full wheelhouse
# serves a lean build too.
NO_TORCH='^torch(==|\[|$)'
WHEEL_REQS="$CACHE/wheel-requirements-$$.txt"  # per run: builds of other checkouts share the cache
needs_torch=0
for t in "${targets[@]}"; do [[ $t == runtime || $t == runtime-cuda ]] && needs_torch=1; done
if [[ $needs_torch == 1 ]]; then
    cp "$REPO/runtime-image/requirements.txt" "$WHEEL_REQS"
else
    grep -v -E "$NO_TORCH" "$REPO/runtime-image/requirements.txt" >"$WHEEL_REQS"
fi
WHEELS_KEY=$( (printf '%s\n' "$BASE_TAG" "$TORCH_INDEX_URL"; cat "$REPO/pyproject.toml" "$REPO/constraints.txt" \
    "$REPO/runtime-image/requirements.txt") | hash_of)
LEAN_WHEELS_KEY=$( (printf '%s\n' "$BASE_TAG" "$TORCH_INDEX_URL"; cat "$REPO/pyproject.toml" "$REPO/constraints.txt" "$WHEEL_REQS") | hash_of)
wheels_stamp=$(cat "$WHEELS/.inputs" 2>/dev/null || true)
if [[ ${FORCE:-0} != 1 && ( $wheels_stamp == "$WHEELS_KEY" || ( $needs_torch == 0 && $wheels_stamp == "$LEAN_WHEELS_KEY" ) ) ]]; then
    step "wheelhouse: up to date ($(find "$WHEELS" -name '*.whl' | wc -l) wheels)"
else
    step "wheelhouse: pip download into $WHEELS (log: $LOGS/wheels.log)"
    # One resolution per image, as each Dockerfile's pip resolves it: the runtime's pinned requirements; the
    # operator's dependencies from pyproject.toml, plus the build backend that builds kubepool's own wheel.
    ctr=$(buildah from --pull-never "$BASE_REF")
    trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
    run wheels buildah run --isolation chroot --network host "${DOWNLOAD_MOUNTS[@]}" -v "$REPO:/src:ro" \
        -v "$WHEEL_REQS:/root/wheel-requirements.txt:ro" "$ctr" -- sh -euc '
        python -m venv /tmp/v
        python - >/tmp/operator.txt <<PY
import tomllib
p = tomllib.load(open("/src/pyproject.toml", "rb"))
print("\n".join(p["build-system"]["requires"] + p["project"]["dependencies"]
                + p["project"]["optional-dependencies"]["operator"]))
PY
        /tmp/v/bin/pip download --progress-bar off -d /root/wheels --extra-index-url "'"$TORCH_INDEX_URL"'" -r /root/wheel-requirements.txt
        /tmp/v/bin/pip download --progress-bar off -d /root/wheels -c /src/constraints.txt -r /tmp/operator.txt'
    buildah rm "$ctr" >/dev/null
    trap - EXIT
    if [[ $needs_torch == 1 ]]; then echo "$WHEELS_KEY"; else echo "$LEAN_WHEELS_KEY"; fi >"$WHEELS/.inputs"
    step "wheelhouse: $(find "$WHEELS" -name '*.whl' | wc -l) wheels, $(du -sm "$WHEELS" | cut -f1) MB"
fi
rm -f "$WHEEL_REQS"

# --- the images -----------------------------------------------------------------------------------------------
# inputs_hash DOCKERFILE FILES...: what a build of DOCKERFILE depends on, besides the build args.
inputs_hash() {
    local dockerfile=$1
    shift
    (
        cd "$REPO"
        # The recipe is this script's code (declare -f leaves the comments out) and the pip.conf.
        declare -f build_image mounts
        cat "$CACHE/home-build/.config/pip/pip.conf" "$dockerfile" "$dockerfile.dockerignore" 2>/dev/null
        # As the .dockerignore files copy them: no caches, no byte code.
        find "$@" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
    ) | hash_of
}

report() {  # NAME: digest and sizes of the image's archive
    local name=$1 archive="$CACHE/$1-$TAG.oci.tar"
    local digest size unpacked
    digest=$(cat "$CACHE/$name-$TAG.digest")
    size=$(du -m "$archive" | cut -f1)
    unpacked=$(cat "$CACHE/$name-$TAG.size")
    printf '[images %4ds] %-13s %s  %s  archive %s MB (gzip layers), unpacked %s: %s\n' $((SECONDS - T0)) \
        "$name" "$(image_name "$name")" "$digest" "$size" "$unpacked" "$archive"
}

image_name() {
    case $1 in
    operator) echo "kubepool/operator:$TAG" ;;
    runtime) echo "kubepool/runtime:$TAG" ;;
    runtime-cuda) echo "kubepool/runtime:$TAG-cuda" ;;
    esac
}

image_id() { buildah images --quiet --no-trunc "localhost/$1" 2>/dev/null || true; }
# drop_replaced OLD-ID REF: the image a build replaced would stay in the store untagged, GBs per rebuild; drop
# it (layers another image or the --layers cache still uses stay: buildah keeps what something else needs).
drop_replaced() {
    [[ -z $1 || $1 == "$(image_id "$2")" ]] || buildah rmi "$1" >/dev/null 2>&1 || true
}

build_image() {
    local name=$1 dockerfile args=() files=(pyproject.toml README.md src)
    case $name in
    operator)
        dockerfile=operator/Dockerfile
        files+=(constraints.txt)
        args=(--build-arg "PYTHON_IMAGE=$BASE_REF")
        ;;
    runtime | runtime-cuda)
        dockerfile=runtime-image/Dockerfile
        files+=(runtime-image/requirements.txt)
        args=(--build-arg "PYTHON_IMAGE=$BASE_REF" --build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL")
        if [[ $name == runtime-cuda ]]; then
            # No nvidia/cuda base can be pulled here: the CUDA variant is the same Debian base plus what the
            # NVIDIA container runtime reads (hack/images/cuda-base.Dockerfile); PyPI's torch wheels bring
            # the CUDA libraries themselves.
            local cuda_base="localhost/kubepool/base:$BASE_TAG-cuda"
            if ! buildah inspect --type image "$cuda_base" >/dev/null 2>&1; then
                step "$name: base $cuda_base"
                run cuda-base buildah bud --isolation chroot --network host --layers \
                    -f "$HERE/cuda-base.Dockerfile" --build-arg "BASE_IMAGE=$BASE_REF" -t "$cuda_base" "$HERE"
            fi
            args+=(--build-arg "BASE_IMAGE=$cuda_base")
        fi
        ;;
    esac
    local ref archive="$CACHE/$name-$TAG.oci.tar" stamp="$CACHE/$name-$TAG.inputs" key
    ref=$(image_name "$name")
    key=$( (inputs_hash "$dockerfile" "${files[@]}"; printf '%s\n' "$BASE_TAG" "${args[@]}") | hash_of)
    if [[ ${FORCE:-0} != 1 && -f $archive && -f $CACHE/$name-$TAG.digest && "$(cat "$stamp" 2>/dev/null)" == "$key" ]]; then
        step "$name: inputs unchanged ($key), keeping $archive"
        report "$name"
        return
    fi
    rm -f "$stamp"
    step "$name: buildah bud -f $dockerfile (log: $LOGS/$name-build.log)"
    # --layers: a source change rebuilds from its COPY on, so the runtime's pinned packages stay cached.
    # PIP_NO_CACHE_DIR empty: pip uses the mounted host cache (the Dockerfiles default it to off).
    local previous
    previous=$(image_id "$ref")
    run "$name-build" buildah bud --isolation chroot --network host --layers --format oci \
        -f "$REPO/$dockerfile" -t "$ref" "${args[@]}" --build-arg PIP_NO_CACHE_DIR= "${BUILD_MOUNTS[@]}" "$REPO"
    drop_replaced "$previous" "$ref"
    step "$name: writing the OCI archive"
    rm -f "$archive.tmp"
    # The archive names the image fully (docker.io/...), as `ctr import` and registries expect.
    run "$name-push" buildah push --digestfile "$CACHE/$name-$TAG.digest" "localhost/$ref" \
        "oci-archive:$archive.tmp:docker.io/$ref"
    mv "$archive.tmp" "$archive"
    buildah images --noheading --format "{{.Size}}" "localhost/$ref" >"$CACHE/$name-$TAG.size" || true
    echo "$key" >"$stamp"
    report "$name"
}

# runtime-lean: the runtime image without torch (kubepool/runtime:$TAG-lean, ~1/5 of the size), for the real-node
# tier (tests/realnode), whose jobs (XGBoost, Ray) never import torch. The same Dockerfile and recipe, built from a
# copy of the context whose requirements.txt leaves torch out; build_image itself is unchanged, so the other
# images' input hashes are too.
build_runtime_lean() {
    local ctx="$CACHE/lean-context"
    mkdir -p "$ctx/runtime-image"
    rm -rf "$ctx/src"
    cp -a "$REPO/src" "$REPO/pyproject.toml" "$REPO/README.md" "$ctx/"
    find "$ctx/src" -name __pycache__ -prune -exec rm -rf {} +
    cp "$REPO/runtime-image/Dockerfile" "$REPO/runtime-image/Dockerfile.dockerignore" "$ctx/runtime-image/"
    grep -v -E "$NO_TORCH" "$REPO/runtime-image/requirements.txt" >"$ctx/runtime-image/requirements.txt"
    REPO=$ctx TAG=$TAG-lean build_image runtime
}

# runtime-marked: runtime-lean plus one file, /etc/kubepool-image, holding the image's own name: a second
# runtime image that differs observably, for the real-node test that a ComputePool's spec.image is what its
# instances run. Its layers are runtime-lean's, so a node that has that image unpacks only the marker.
build_runtime_marked() {
    local tag=$TAG-lean-marked lean="localhost/kubepool/runtime:$TAG-lean"
    local ref="kubepool/runtime:$tag" archive="$CACHE/runtime-$tag.oci.tar" stamp="$CACHE/runtime-$tag.inputs" key ctr previous
    build_runtime_lean
    buildah inspect --type image "$lean" >/dev/null 2>&1 ||
        { echo "$lean is not in the build storage: FORCE=1 hack/images/build.sh runtime-lean" >&2; exit 1; }
    key=$( (declare -f build_runtime_marked; cat "$CACHE/runtime-$TAG-lean.digest") | hash_of)
    if [[ ${FORCE:-0} != 1 && -f $archive && "$(cat "$stamp" 2>/dev/null)" == "$key" ]]; then
        step "runtime-marked: runtime-lean unchanged ($key), keeping $archive"
        TAG=$tag report runtime
        return
    fi
    rm -f "$stamp"
    step "runtime-marked: $lean + /etc/kubepool-image"
    printf '%s\n' "$ref" >"$TMPDIR/kubepool-image"
    chmod 0644 "$TMPDIR/kubepool-image"
    ctr=$(buildah from --pull-never "$lean")
    previous=$(image_id "$ref")
    run marked-copy buildah copy "$ctr" "$TMPDIR/kubepool-image" /etc/kubepool-image
    run marked-commit buildah commit --format oci --rm "$ctr" "$ref"
    drop_replaced "$previous" "$ref"
    rm -f "$archive.tmp"
    run marked-push buildah push --digestfile "$CACHE/runtime-$tag.digest" "localhost/$ref" \
        "oci-archive:$archive.tmp:docker.io/$ref"
    mv "$archive.tmp" "$archive"
    buildah images --noheading --format "{{.Size}}" "localhost/$ref" >"$CACHE/runtime-$tag.size" || true
    echo "$key" >"$stamp"
    TAG=$tag report runtime
}

for t in "${targets[@]}"; do
    case $t in
    runtime-lean) build_runtime_lean ;;
    runtime-marked) build_runtime_marked ;;
    *) build_image "$t" ;;
    esac
done
step "done"
