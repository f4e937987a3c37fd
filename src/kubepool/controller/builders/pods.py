"""Builds the instance pods of a job attempt: one pod per instance, placed on the instance's pool (one
instance per node), wired to the runtime contract and locked down to the `restricted` Pod Security
level. Pure."""

from __future__ import annotations

from collections.abc import Container, Sequence

from kubepool import contract, naming
from kubepool.api import ComputePool, MLJob
from kubepool.controller.builders.common import (
    RAY_TOKEN_KEY,
    JobRef,
    Obj,
    Placement,
    laid_out,
    local_port_shift,
    pool_image,
    pool_named,
)
from kubepool.controller.builders.envfrom import env_from_secret_volumes
from kubepool.controller.builders.jobcontract import channel_mount_path, results_store
from kubepool.controller.builders.pip import pip_env, pip_volumes
from kubepool.controller.builders.podsettings import PodSettingsOf, kueue_placement, pod_settings
from kubepool.controller.config import OperatorConfig, RuntimeAccountPolicy

CONTAINER = "runtime"
# Taints of a lost node: instances leave it after cfg.node_lost_seconds instead of Kubernetes' default 300 s.
NODE_LOST_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _resources(pool: ComputePool, cfg: OperatorConfig) -> Obj:
    size = pool.spec.instance_size()
    amounts: dict[str, str] = {"cpu": size.cpu, "memory": size.memory}
    if size.gpus:
        amounts[cfg.accelerator_resource] = str(size.gpus)
    # requests == limits: the instance owns its node's share (Guaranteed QoS), as on Snowflake.
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _affinity(pool_name: str, users: Obj | None = None) -> Obj:
    # One instance of a pool per node, across all the pool's jobs in every namespace: the pool's unit is a node.
    # The job's own podAntiAffinity terms are added to that one, never replace it.
    term = {"labelSelector": {"matchLabels": {naming.LABEL_POOL: pool_name}}, "namespaceSelector": {},
            "topologyKey": "kubernetes.io/hostname"}
    users = users or {}
    anti = dict(users.get("podAntiAffinity") or {})
    anti["requiredDuringSchedulingIgnoredDuringExecution"] = [term, *anti.get("requiredDuringSchedulingIgnoredDuringExecution", [])]
    return {**users, "podAntiAffinity": anti}


def _env(job: MLJob, inst: Placement, ref: JobRef, cfg: OperatorConfig, mine: PodSettingsOf) -> list[Obj]:
    spec = job.spec
    env: list[Obj] = [
        {"name": contract.ENV_CONTRACT_FILE, "value": contract.CONTRACT_PATH},
        {"name": contract.ENV_INSTANCE_ID, "value": str(inst.instance_id)},
        {"name": contract.ENV_POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": contract.ENV_POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": contract.ENV_NAMESPACE, "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": contract.ENV_BASE_DIR, "value": contract.DEFAULT_BASE_DIR},
        {"name": contract.ENV_PAYLOAD_DIR, "value": contract.PAYLOAD_DIR},
        {"name": contract.ENV_RESULT_DIR, "value": contract.RESULT_DIR},
        {"name": contract.ENV_RAY_AUTH_MODE, "value": spec.ray.auth_mode},
    ]
    if spec.ray.auth_mode == "token":
        env.append({"name": contract.ENV_RAY_AUTH_TOKEN, "valueFrom": {"secretKeyRef": {
            "name": naming.job_secret_name(ref.name), "key": RAY_TOKEN_KEY}}})
    if cfg.ray_port_stride:
        offset = local_port_shift(ref.uid, cfg.ray_port_stride) + inst.instance_id * cfg.ray_port_stride
        env.append({"name": contract.ENV_RAY_PORT_OFFSET, "value": str(offset)})
    ours = {e["name"] for e in env}
    # User env cannot override the contract's variables: the runtime would read a lie.
    # Literal values: Kubernetes expands `$(VAR)` in env values, so every `$` is escaped (`$$`).
    env.extend(({"name": e.name, "valueFrom": e.value_from} if e.value_from else
                {"name": e.name, "value": e.value.replace("$", "$$")}) for e in mine.env if e.name not in ours)
    users = {e.name for e in mine.env}
    env.extend(e for e in pip_env(job, cfg) if e["name"] not in users)  # a job's own PIP_* env wins
    return env


def _volumes(job: MLJob, inst: Placement, ref: JobRef, mine: PodSettingsOf) -> tuple[list[Obj], list[Obj]]:
    spec = job.spec
    volumes: list[Obj] = [
        # The contract's key alone: the token is not a file of the pod (it is a variable of the runtime's).
        {"name": "contract", "secret": {"secretName": naming.job_secret_name(ref.name),
                                        "items": [{"key": contract.CONTRACT_FILENAME, "path": contract.CONTRACT_FILENAME}]}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "base", "emptyDir": {}},
        {"name": "result", "emptyDir": {}},
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
    ]
    mounts: list[Obj] = [
        {"name": "contract", "mountPath": contract.CONTRACT_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": contract.TMP_DIR},
        {"name": "base", "mountPath": contract.DEFAULT_BASE_DIR},
        {"name": "result", "mountPath": contract.RESULT_DIR},
        {"name": "dshm", "mountPath": contract.SHM_DIR},
    ]
    code = spec.code
    if code is not None and code.config_map:
        volumes.append({"name": "payload", "configMap": {"name": code.config_map}})
        mounts.append({"name": "payload", "mountPath": contract.PAYLOAD_DIR, "readOnly": True})
    elif code is not None and code.persistent_volume_claim:
        pvc = code.persistent_volume_claim
        volumes.append({"name": "payload", "persistentVolumeClaim": {"claimName": pvc.claim_name, "readOnly": True}})
        mounts.append({"name": "payload", "mountPath": contract.PAYLOAD_DIR, "readOnly": True,
                       **({"subPath": pvc.sub_path} if pvc.sub_path else {})})
    for i, ch in enumerate(spec.channels or []):
        if ch.instance_groups and inst.group not in ch.instance_groups:
            continue  # SageMaker: a channel assigned to groups reaches only their instances
        src, vol = ch.source, f"channel-{i}"
        mount: Obj = {"name": vol, "mountPath": channel_mount_path(ch.name), "readOnly": True}
        if src.persistent_volume_claim is not None:
            volumes.append({"name": vol, "persistentVolumeClaim": {"claimName": src.persistent_volume_claim.claim_name, "readOnly": True}})
            if src.persistent_volume_claim.sub_path:
                mount["subPath"] = src.persistent_volume_claim.sub_path
        elif src.config_map is not None:
            volumes.append({"name": vol, "configMap": {"name": src.config_map.name}})
        else:
            continue  # s3 channels are downloaded by the runtime
        mounts.append(mount)
    out = spec.output.persistent_volume_claim if spec.output else None
    if out is not None:  # instances write their archives into it (read-write); S3 outputs are uploaded
        volumes.append({"name": "output", "persistentVolumeClaim": {"claimName": out.claim_name}})
        mounts.append({"name": "output", "mountPath": contract.OUTPUT_MOUNT, **({"subPath": out.sub_path} if out.sub_path else {})})
    ckpt = spec.checkpoint.persistent_volume_claim if spec.checkpoint else None
    if ckpt is not None:  # the checkpoint dir is the volume itself: nothing to sync, it outlives every attempt
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {"claimName": ckpt.claim_name}})
        mounts.append({"name": "checkpoints", "mountPath": contract.CHECKPOINT_DIR,
                       **({"subPath": ckpt.sub_path} if ckpt.sub_path else {})})
    pip_vols, pip_mounts = pip_volumes(job)
    # The job's own come last: the CRD keeps their names and paths clear of the operator's.
    return volumes + pip_vols + mine.volumes, mounts + pip_mounts + mine.volume_mounts


def shared_claims(job: MLJob) -> dict[str, str]:
    """The PersistentVolumeClaims every instance mounts read-write (the output, the checkpoints), each with the
    field that names it: a job of more than one instance needs them ReadWriteMany (its pods run on several
    nodes)."""
    out: dict[str, str] = {}
    for field, loc in (("spec.checkpoint", job.spec.checkpoint), ("spec.output", job.spec.output)):
        if loc is not None and loc.persistent_volume_claim is not None:
            out.setdefault(loc.persistent_volume_claim.claim_name, f"{field}.persistentVolumeClaim")
    return out


def credentials_secrets(job: MLJob) -> list[str]:
    """The Secrets the job's channels and output take credentials from (each must opt in: naming.LABEL_CREDENTIALS)."""
    sources = [c.source.s3 for c in job.spec.channels or []] + [job.spec.output.s3 if job.spec.output else None,
                                                                job.spec.checkpoint.s3 if job.spec.checkpoint else None]
    return list(dict.fromkeys(s.credentials_secret for s in sources if s is not None and s.credentials_secret))


# The variables a credentialsSecret gives (boto3 in runtime/channels.py reads them from the environment).
CREDENTIAL_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def secret_hints(env: list[Obj], credentials: list[str], volumes: list[Obj], mounts: list[Obj],
                 store: bool = False) -> list[Obj]:
    """Where the container's Secret values are, for the runtime to keep them out of its termination message (the
    job's status and Events are built from it): variables from a secretKeyRef or a credentialsSecret, and the
    mounts of secret volumes (a user's envFrom Secrets among them: envfrom.py mounts them, since their variables
    are the Secret's keys, which the operator never reads)."""
    names = [e["name"] for e in env if "secretKeyRef" in (e.get("valueFrom") or {})]
    names += list(CREDENTIAL_KEYS) if credentials else []
    names += [contract.RESULTS_STORE_ENV_PREFIX + k for k in CREDENTIAL_KEYS] if store else []
    # The operator's own volumes hold no Secret value of the job's: the contract's (a secret volume) is no secret,
    # and its lines would be blanked out of the messages (the Ray token is a variable, named above).
    secret = {v["name"] for v in volumes if v["name"] not in contract.OPERATOR_VOLUMES
              and ("secret" in v or any("secret" in src for src in (v.get("projected") or {}).get("sources") or []))}
    dirs = [m["mountPath"] for m in mounts if m["name"] in secret]
    hints = [{"name": contract.ENV_SECRET_ENV, "value": ",".join(names)}] if names else []
    return hints + ([{"name": contract.ENV_SECRET_DIRS, "value": ":".join(dirs)}] if dirs else [])


def store_secret(job: MLJob, inst: Placement, cfg: OperatorConfig) -> str | None:
    """The results store's credentials Secret the head takes (prefixed, optional), when the job keeps a large
    result there (no spec.output)."""
    return results_store(job, cfg.results_location)[1] if inst.instance_id == 0 else None


def _env_from(job: MLJob, mine: PodSettingsOf, store: str | None) -> list[Obj]:
    # optional: a namespace without the store's Secret runs its jobs; the runtime then says what is missing.
    prefixed = [{"prefix": contract.RESULTS_STORE_ENV_PREFIX, "secretRef": {"name": store, "optional": True}}]
    return ([{"secretRef": {"name": s}} for s in credentials_secrets(job)] + (prefixed if store else [])
            + mine.env_from)


def _security(uid: int | None) -> tuple[Obj, Obj]:
    pod: Obj = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    if uid is not None:
        pod.update(runAsUser=uid, runAsGroup=uid, fsGroup=uid)
    container = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                 "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    return pod, container


# A joined instance is seen within this many seconds (RUNNING waits for the instances it counts to be Ready).
JOINED_PROBE_PERIOD_SECONDS = 2


def joined_check(job: MLJob, group: str) -> list[str] | None:
    """The readiness check of a head-mode instance: Ready = joined the job's Ray cluster (`ray start` writes
    RAY_READY_FILE once the GCS has registered the node), not merely started, so the job is RUNNING only once the
    instances it counts have joined. None in parallel and sagemaker modes: no Ray, a running instance is ready."""
    if job.spec.mode is not contract.RunMode.HEAD:
        return None
    temp_dir = next((e.value for e in pod_settings(job, group).env if e.name == contract.ENV_RAY_TEMP_DIR), None)
    return ["test", "-e", f"{temp_dir or contract.DEFAULT_RAY_TEMP_DIR}/{contract.RAY_READY_FILE}"]


def build_instance_pod(job: MLJob, pool: ComputePool, inst: Placement, *, attempt: int, cfg: OperatorConfig) -> Obj:
    """The pod of one instance of one attempt."""
    ref = JobRef.of(job)
    svc = naming.service_name(ref.name)
    mine = pod_settings(job, inst.group)
    volumes, mounts = _volumes(job, inst, ref, mine)
    env_vols, env_mounts = env_from_secret_volumes(mine.env_from)  # their values, for the runtime's redaction
    volumes, mounts = volumes + env_vols, mounts + env_mounts
    pod_sc, container_sc = _security(cfg.run_as_user)
    container: Obj = {
        "name": CONTAINER,
        "image": job.spec.image or pool_image(pool, cfg.default_image, cfg.gpu_image),
        "imagePullPolicy": cfg.image_pull_policy,
        "command": [cfg.python, "-m", "kubepool.runtime"],
        "env": _env(job, inst, ref, cfg, mine),
        "resources": _resources(pool, cfg),
        "volumeMounts": mounts,
        "securityContext": container_sc,
        "terminationMessagePath": contract.TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    store = store_secret(job, inst, cfg)
    env_from = _env_from(job, mine, store)
    if env_from:
        container["envFrom"] = env_from
    container["env"] += secret_hints(container["env"], credentials_secrets(job), volumes, mounts, store is not None)
    joined = joined_check(job, inst.group)
    if joined is not None:
        container["readinessProbe"] = {"exec": {"command": joined}, "periodSeconds": JOINED_PROBE_PERIOD_SECONDS,
                                       "timeoutSeconds": 2}
    account = {RuntimeAccountPolicy.PER_JOB: naming.runtime_service_account_name(ref.name),
               RuntimeAccountPolicy.PER_NAMESPACE: naming.RUNTIME_ACCOUNT}.get(cfg.runtime_account)
    account = mine.service_account_name or account  # the job's own (SageMaker's role), with its token
    spec: Obj = {
        "restartPolicy": "Never",
        "hostname": naming.sagemaker_host(inst.instance_id),
        "subdomain": svc,
        "dnsConfig": {"searches": [f"{svc}.{ref.namespace}.svc.cluster.local"]},
        "containers": [container],
        "volumes": volumes,
        "securityContext": pod_sc,
        "affinity": _affinity(inst.pool, mine.affinity),
        "terminationGracePeriodSeconds": cfg.pod_termination_grace_seconds,
        "automountServiceAccountToken": account is not None,
        "enableServiceLinks": False,
    }
    if account is not None:
        spec["serviceAccountName"] = account
    flavor = kueue_placement(job, naming.dns_label(inst.group))  # the group's ResourceFlavors, where Kueue admitted it
    selector = {**(flavor.get("nodeSelector") or {}), **pool.spec.node_selector}
    if selector:
        spec["nodeSelector"] = selector
    if mine.priority_class_name:
        spec["priorityClassName"] = mine.priority_class_name
    spec["tolerations"] = [t.wire() for t in pool.spec.tolerations] + mine.tolerations + list(flavor.get("tolerations") or []) + [
        {"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": cfg.node_lost_seconds}
        for taint in NODE_LOST_TAINTS]
    role = naming.ROLE_HEAD if inst.instance_id == 0 else naming.ROLE_WORKER
    meta = ref.metadata(
        naming.pod_name(ref.name, inst.group, inst.rank, attempt),
        **{naming.LABEL_GROUP: naming.dns_label(inst.group), naming.LABEL_INSTANCE: str(inst.instance_id),
           naming.LABEL_ROLE: role, naming.LABEL_POOL: inst.pool, naming.LABEL_ATTEMPT: str(attempt)},
    )
    meta["labels"] = {**mine.labels, **meta["labels"]}  # the operator's own always win
    if mine.annotations:
        meta["annotations"] = dict(mine.annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def build_instance_pods(job: MLJob, pools: dict[str, ComputePool], *, granted: int, attempt: int,
                        cfg: OperatorConfig, head_only: bool = False, skip: Container[str] = (),
                        layout: Sequence[Placement] | None = None) -> list[Obj]:
    """Pods of the first `granted` instances (admission grants a prefix that contains the head); with `head_only`,
    only the head's. Pods named in `skip` (they exist) are not built: a pass builds only what it may create.
    `layout`: the pass's (`laid_out`)."""
    name = JobRef.of(job).name
    return [build_instance_pod(job, pool_named(pools, p.pool), p, attempt=attempt, cfg=cfg)
            for p in laid_out(job, layout)[:granted]
            if not (head_only and p.instance_id != 0) and naming.pod_name(name, p.group, p.rank, attempt) not in skip]
