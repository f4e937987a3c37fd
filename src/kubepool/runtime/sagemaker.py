"""SageMaker training-container compatibility: the `/opt/ml` tree, its three config files and the `SM_*` env.

Owns what a SageMaker script sees (research notes A.1-A.8, toolkit `Environment.to_env_vars`): pure builders
from the contract and this instance's identity, plus `write_config_files`. Channel data is fetched by
`kubepool.runtime.channels`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubepool import naming
from kubepool.contract import ENV_FRAMEWORK, Channel, InstanceIdentity, JobContract

NETWORK_INTERFACE = "eth0"
DEFAULT_LOG_LEVEL = 20
# Toolkit's SAGEMAKER_HYPERPARAMETERS (params.py): removed from the user's hps and not framework params either,
# though three of them lack the sagemaker_ prefix.
PLATFORM_HYPERPARAMETERS = frozenset(
    {
        "sagemaker_program",
        "sagemaker_submit_directory",
        "sagemaker_enable_cloudwatch_metrics",
        "sagemaker_container_log_level",
        "sagemaker_job_name",
        "sagemaker_region",
        "default_user_module_name",
        "_tuning_objective_metric",
        "sagemaker_s3_output",
    }
)
# Not platform-only: the toolkit reads it from the framework parameters (Environment.distribution_instance_groups).
DISTRIBUTION_GROUPS_HP = "sagemaker_distribution_instance_groups"
# Any of these set means "distributed", so the toolkit falls back to the current group (A.8).
DISTRIBUTED_FLAGS = (
    "sagemaker_mpi_enabled",
    "sagemaker_parameter_server_enabled",
    "sagemaker_distributed_dataparallel_enabled",
    "sagemaker_pytorch_ddp_enabled",
    "sagemaker_pytorch_xla_multi_worker_enabled",
    "sagemaker_multi_worker_mirrored_strategy_enabled",
    "sagemaker_torch_distributed_enabled",
)


@dataclass(frozen=True)
class Layout:
    """SageMaker's directory tree under one base directory (/opt/ml in a real container)."""

    base: Path

    @property
    def code_dir(self) -> Path:
        return self.base / "code"

    @property
    def input_dir(self) -> Path:
        return self.base / "input"

    @property
    def config_dir(self) -> Path:
        return self.input_dir / "config"

    @property
    def data_dir(self) -> Path:
        return self.input_dir / "data"

    @property
    def model_dir(self) -> Path:
        return self.base / "model"

    @property
    def output_dir(self) -> Path:
        return self.base / "output"

    @property
    def output_data_dir(self) -> Path:
        return self.output_dir / "data"

    @property
    def output_intermediate_dir(self) -> Path:
        return self.output_dir / "intermediate"

    def channel_dir(self, name: str) -> Path:
        return self.data_dir / name

    def create(self) -> None:
        for d in (self.config_dir, self.data_dir, self.model_dir, self.output_data_dir, self.output_intermediate_dir):
            d.mkdir(parents=True, exist_ok=True)


def host_order(hosts: Sequence[str]) -> list[str]:
    """SageMaker's order of host names: "sorted lexicographically" (the toolkit's Environment docs), so
    algo-10 comes before algo-2 in a job of ten or more."""
    return sorted(hosts)


def resource_config(contract: JobContract, me: InstanceIdentity) -> dict[str, Any]:
    """resourceconfig.json; a homogeneous job is one group named homogeneousCluster, as on SageMaker."""
    groups = [
        {
            "hosts": host_order([i.host for i in contract.instances if i.group == g.name]),
            "instance_group_name": g.name,
            "instance_type": g.instance_type,
        }
        for g in contract.groups
    ]
    return {
        "current_group_name": me.group,
        "current_host": me.host,
        "current_instance_type": contract.group_of(me.group).instance_type,
        "hosts": host_order(me.hosts),
        "instance_groups": groups,
        "network_interface_name": NETWORK_INTERFACE,
    }


def input_data_config(channels: Sequence[Channel]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for c in channels:
        entry = {"TrainingInputMode": c.input_mode, "S3DistributionType": c.distribution.value, "RecordWrapperType": "None"}
        if c.content_type:
            entry["ContentType"] = c.content_type
        out[c.name] = entry
    return out


def hyperparameters(contract: JobContract) -> dict[str, str]:
    """hyperparameters.json as SageMaker writes it: the user's, plus the SageMaker SDK's
    `sagemaker_distribution_instance_groups` (JSON) when the job names its distribution groups."""
    out = dict(contract.hyperparameters)
    if contract.distribution_instance_groups and DISTRIBUTION_GROUPS_HP not in out:
        out[DISTRIBUTION_GROUPS_HP] = json.dumps(list(contract.distribution_instance_groups))
    return out


def decode_hyperparameters(raw: Mapping[str, str]) -> dict[str, Any]:
    """The toolkit's read_hyperparameters: each value is JSON if it parses, else the raw string."""
    out: dict[str, Any] = {}
    for k, v in raw.items():
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def split_hyperparameters(decoded: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(user hyperparameters, additional framework parameters)."""
    def platform(k: str) -> bool:  # the toolkit's mapping.split_by_criteria(keys=..., prefix="sagemaker_")
        return k.startswith("sagemaker_") or k in PLATFORM_HYPERPARAMETERS

    user = {k: v for k, v in decoded.items() if not platform(k)}
    framework = {k: v for k, v in decoded.items() if platform(k) and k not in PLATFORM_HYPERPARAMETERS}
    return user, framework


def distribution_instance_groups(contract: JobContract, current_group: str, decoded: Mapping[str, Any]) -> list[str]:
    """The operator's choice first, then the toolkit's rule from the hyperparameters (A.8)."""
    if contract.distribution_instance_groups:
        return list(contract.distribution_instance_groups)
    if DISTRIBUTION_GROUPS_HP in decoded:
        return list(decoded[DISTRIBUTION_GROUPS_HP])
    if any(decoded.get(flag) for flag in DISTRIBUTED_FLAGS):
        return [current_group]
    return []


def distribution_hosts(rc: Mapping[str, Any], groups: Sequence[str]) -> list[str]:
    return [h for g in rc["instance_groups"] if g["instance_group_name"] in groups for h in g["hosts"]]


def to_cmd_args(mapping: Mapping[str, Any]) -> list[str]:
    """The toolkit's to_cmd_args: sorted keys, `-k` for one-letter keys, dicts as k=v,k2=v2, None as ""."""
    args: list[str] = []
    for key in sorted(mapping):
        value = mapping[key]
        args.append(f"--{key}" if len(key) > 1 else f"-{key}")
        if isinstance(value, dict):
            args.append(",".join(f"{k}={v}" for k, v in sorted(value.items())))
        else:
            args.append("" if value is None else str(value))
    return args


def encode_env_value(value: Any) -> str:
    """SM_* encoding: str raw, None empty, anything else compact JSON with sorted keys."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def entry_point_name(contract: JobContract) -> str:
    ep = contract.entrypoint
    if ep.path:
        return Path(ep.path).name
    return ep.module or " ".join(ep.command or [])


def training_env(
    contract: JobContract, me: InstanceIdentity, layout: Layout, *, num_cpus: int, num_gpus: int, module_dir: str,
    entry: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Every property of the toolkit's Environment: SM_TRAINING_ENV, and the source of the SM_* variables.
    `entry` (script mode: runtime.script_mode.training_entry) gives user_entry_point, module_name, module_dir."""
    rc = resource_config(contract, me)
    channels = contract.channels_for(me.group)
    decoded = decode_hyperparameters(hyperparameters(contract))
    user_hps, framework = split_hyperparameters(decoded)
    dist_groups = distribution_instance_groups(contract, me.group, decoded)
    dist_hosts = distribution_hosts(rc, dist_groups)
    master = dist_hosts[0] if dist_hosts else rc["hosts"][0]
    groups_dict = {g["instance_group_name"]: g for g in rc["instance_groups"]}
    entry_name = entry_point_name(contract)
    return {
        "additional_framework_parameters": framework,
        "channel_input_dirs": {c.name: str(layout.channel_dir(c.name)) for c in channels},
        "current_host": me.host,
        "current_instance_group": me.group,
        "current_instance_group_hosts": groups_dict.get(me.group, {}).get("hosts", []),
        "current_instance_type": rc["current_instance_type"],
        "distribution_hosts": dist_hosts,
        "distribution_instance_groups": dist_groups,
        "framework_module": None,
        "hosts": rc["hosts"],
        "hyperparameters": user_hps,
        "input_config_dir": str(layout.config_dir),
        "input_data_config": input_data_config(channels),
        "input_dir": str(layout.input_dir),
        "instance_groups": list(groups_dict),
        "instance_groups_dict": groups_dict,
        "is_hetero": contract.is_hetero,
        "is_master": me.host == master,
        "is_modelparallel_enabled": False,
        "is_smddpmprun_installed": False,
        "is_smddprun_installed": False,
        "job_name": contract.job_name,
        "log_level": int(decoded.get("sagemaker_container_log_level", DEFAULT_LOG_LEVEL)),
        "master_hostname": master,
        "model_dir": str(layout.model_dir),
        "module_dir": module_dir,
        "module_name": Path(entry_name).stem if contract.entrypoint.path else entry_name,
        "network_interface_name": NETWORK_INTERFACE,
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "num_neurons": 0,
        "output_data_dir": str(layout.output_data_dir),
        "output_dir": str(layout.output_dir),
        "output_intermediate_dir": str(layout.output_intermediate_dir),
        "resource_config": rc,
        "topology": None,
        "user_entry_point": entry_name,
        **(entry or {}),
    }


def env_vars(env: Mapping[str, Any]) -> dict[str, str]:
    """The toolkit's to_env_vars over a training_env() dict."""
    flat: dict[str, Any] = {
        "hosts": env["hosts"],
        "network_interface_name": env["network_interface_name"],
        "hps": env["hyperparameters"],
        "user_entry_point": env["user_entry_point"],
        "framework_params": env["additional_framework_parameters"],
        "resource_config": env["resource_config"],
        "input_data_config": env["input_data_config"],
        "output_data_dir": env["output_data_dir"],
        "channels": sorted(env["channel_input_dirs"]),
        "current_host": env["current_host"],
        "current_instance_type": env["current_instance_type"],
        "current_instance_group": env["current_instance_group"],
        "current_instance_group_hosts": env["current_instance_group_hosts"],
        "instance_groups": env["instance_groups"],
        "instance_groups_dict": env["instance_groups_dict"],
        "distribution_instance_groups": env["distribution_instance_groups"],
        "is_hetero": env["is_hetero"],
        "module_name": env["module_name"],
        "log_level": env["log_level"],
        "framework_module": env["framework_module"],
        "input_dir": env["input_dir"],
        "input_config_dir": env["input_config_dir"],
        "output_dir": env["output_dir"],
        "num_cpus": env["num_cpus"],
        "num_gpus": env["num_gpus"],
        "num_neurons": env["num_neurons"],
        "model_dir": env["model_dir"],
        "module_dir": env["module_dir"],
        "training_env": dict(env),
        "user_args": to_cmd_args(env["hyperparameters"]),
        "output_intermediate_dir": env["output_intermediate_dir"],
    }
    flat.update({f"channel_{name}": path for name, path in env["channel_input_dirs"].items()})
    flat.update({f"hp_{name}": value for name, value in env["hyperparameters"].items()})
    out = {f"SM_{k.upper()}": encode_env_value(v) for k, v in flat.items()}
    out["CURRENT_HOST"] = env["current_host"]  # the toolkit's Environment() sets it too
    out["TRAINING_JOB_NAME"] = env["job_name"]
    # The toolkit (sagemaker_training.environment) reads its config files under this base, /opt/ml by default:
    # where the tree is elsewhere (local process nodes), scripts built on the toolkit find it here.
    out["SAGEMAKER_BASE_DIR"] = str(Path(env["input_dir"]).parent)
    return out


def torchrun_env(contract: JobContract, me: InstanceIdentity, env: Mapping[str, Any]) -> dict[str, str]:
    """torch.distributed env for an instance of the distribution group: one process per instance, master =
    the group's first host, reached through its stable DNS name. Empty outside the distribution group."""
    hosts: list[str] = env["distribution_hosts"]
    if me.host not in hosts:
        return {}
    master_dns = next(i.dns for i in contract.instances if i.host == hosts[0])
    rank = hosts.index(me.host)
    return {
        "MASTER_ADDR": master_dns,
        "MASTER_PORT": str(naming.TORCH_MASTER_PORT),
        "WORLD_SIZE": str(len(hosts)),
        "RANK": str(rank),
        "NODE_RANK": str(rank),
        "GROUP_RANK": str(rank),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
    }


def write_config_files(layout: Layout, env: Mapping[str, Any], hyperparameters: Mapping[str, str]) -> None:
    layout.create()
    files = {
        "resourceconfig.json": env["resource_config"],
        "inputdataconfig.json": env["input_data_config"],
        "hyperparameters.json": dict(hyperparameters),
    }
    for name, doc in files.items():
        (layout.config_dir / name).write_text(json.dumps(doc, sort_keys=True, indent=1))


class FrameworkMismatch(Exception):
    """The image lacks the framework version or Python a framework estimator asked for."""


_PROBE = ("import importlib.metadata as m, json, sys\n"
          "try:\n    v = m.version(sys.argv[1])\nexcept m.PackageNotFoundError:\n    v = None\n"
          "print(json.dumps([v, '%d.%d.%d' % sys.version_info[:3]]))")


def _numbers(version: str) -> list[int]:
    return [int(m.group()) for m in (re.match(r"\d+", p) for p in version.split("+")[0].split(".")) if m]


def framework_problem(env: Mapping[str, str]) -> str | None:
    """What the payload's environment (the image, and the job's pipRequirements) lacks of the framework
    estimator's framework_version and py_version (ENV_FRAMEWORK; `2.5` asks for any 2.5.x, `py311` for Python
    3.11), or None when it has them or none was asked for."""
    if not env.get(ENV_FRAMEWORK):
        return None
    want = json.loads(env[ENV_FRAMEWORK])
    out = subprocess.run([sys.executable, "-c", _PROBE, want["package"]], env=dict(env), capture_output=True,
                         text=True, check=True, timeout=120).stdout
    have, python = json.loads(out.splitlines()[-1])
    problems = []
    fv = want.get("framework_version")
    if fv and (have is None or _numbers(have)[:len(_numbers(fv))] != _numbers(fv)):
        problems.append(f"framework_version {fv}: the image has {want['package']} {have or 'not installed'}")
    pv = want.get("py_version")
    digits = pv[2:] if pv else ""
    asked = [int(digits[0])] + ([int(digits[1:])] if digits[1:] else []) if digits else []
    if pv and _numbers(python)[:len(asked)] != asked:
        problems.append(f"py_version {pv}: the image has Python {python}")
    if not problems:
        return None
    return "; ".join(problems) + " (use an image that has them: image_uri, or the pool's image; or pipRequirements)"
