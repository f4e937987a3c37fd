"""SageMaker compatibility, field by field against the research notes' samples (runtime-contracts.md A.2-A.8)."""

from __future__ import annotations

import json
from pathlib import Path

from kubepool.contract import Channel, ChannelSource, Entrypoint, Group, JobContract, RunMode
from kubepool.runtime import sagemaker
from kubepool.runtime.sagemaker import Layout

# Real heterogeneous resourceconfig.json dumped on algo-1 (hello.world.sagemaker notebook).
HETERO_SAMPLE = {
    "current_group_name": "data_group",
    "current_host": "algo-1",
    "current_instance_type": "ml.c5.xlarge",
    "hosts": ["algo-1", "algo-2"],
    "instance_groups": [
        {"hosts": ["algo-1"], "instance_group_name": "data_group", "instance_type": "ml.c5.xlarge"},
        {"hosts": ["algo-2"], "instance_group_name": "dnn_group", "instance_type": "ml.m4.xlarge"},
    ],
    "network_interface_name": "eth0",
}
# Real homogeneous PyTorch DLC log.
HOMOGENEOUS_RC = (
    '{"current_group_name":"homogeneousCluster","current_host":"algo-1","current_instance_type":"ml.g5.2xlarge",'
    '"hosts":["algo-1"],"instance_groups":[{"hosts":["algo-1"],"instance_group_name":"homogeneousCluster",'
    '"instance_type":"ml.g5.2xlarge"}],"network_interface_name":"eth0"}'
)
HOMOGENEOUS_ENV = {
    "SM_CURRENT_INSTANCE_TYPE": "ml.g5.2xlarge",
    "SM_CURRENT_INSTANCE_GROUP": "homogeneousCluster",
    "SM_CURRENT_INSTANCE_GROUP_HOSTS": '["algo-1"]',
    "SM_INSTANCE_GROUPS": '["homogeneousCluster"]',
    "SM_INSTANCE_GROUPS_DICT": '{"homogeneousCluster":{"hosts":["algo-1"],"instance_group_name":"homogeneousCluster","instance_type":"ml.g5.2xlarge"}}',
    "SM_DISTRIBUTION_INSTANCE_GROUPS": "[]",
    "SM_IS_HETERO": "false",
    "SM_RESOURCE_CONFIG": HOMOGENEOUS_RC,
}
LAYOUT = Layout(Path("/opt/ml"))


def hetero(**kw: object) -> JobContract:
    return JobContract(
        job_name="hello",
        namespace="ns",
        job_uid="u",
        groups=[Group(name="data_group", instance_type="ml.c5.xlarge", count=1), Group(name="dnn_group", instance_type="ml.m4.xlarge", count=1)],
        target_instances=2,
        min_instances=2,
        entrypoint=Entrypoint(path="train.py"),
        mode=RunMode.SAGEMAKER,
        **kw,  # type: ignore[arg-type]
    )


def tenv(contract: JobContract, instance_id: int) -> dict[str, object]:
    return sagemaker.training_env(contract, contract.identity(instance_id), LAYOUT, num_cpus=4, num_gpus=0, module_dir="/opt/kubepool/payload")


def test_resourceconfig_matches_the_real_heterogeneous_file() -> None:
    c = hetero()
    assert sagemaker.resource_config(c, c.identity(0)) == HETERO_SAMPLE
    other = sagemaker.resource_config(c, c.identity(1))
    assert (other["current_host"], other["current_group_name"], other["current_instance_type"]) == ("algo-2", "dnn_group", "ml.m4.xlarge")


def test_homogeneous_env_matches_the_real_log() -> None:
    c = JobContract(
        job_name="j", namespace="ns", job_uid="u", groups=[Group(name="homogeneousCluster", instance_type="ml.g5.2xlarge", count=1)],
        target_instances=1, min_instances=1, entrypoint=Entrypoint(path="train.py"),
    )
    env = sagemaker.env_vars(tenv(c, 0))
    for key, value in HOMOGENEOUS_ENV.items():
        assert env[key] == value, key
    training = json.loads(env["SM_TRAINING_ENV"])
    assert (training["distribution_hosts"], training["is_master"], training["master_hostname"]) == ([], True, "algo-1")


def test_training_env_has_every_toolkit_property() -> None:
    keys = """additional_framework_parameters channel_input_dirs current_host current_instance_group
    current_instance_group_hosts current_instance_type distribution_hosts distribution_instance_groups
    framework_module hosts hyperparameters input_config_dir input_data_config input_dir instance_groups
    instance_groups_dict is_hetero is_master is_modelparallel_enabled is_smddpmprun_installed
    is_smddprun_installed job_name log_level master_hostname model_dir module_dir module_name
    network_interface_name num_cpus num_gpus num_neurons output_data_dir output_dir output_intermediate_dir
    resource_config topology user_entry_point""".split()
    assert sorted(tenv(hetero(), 0)) == sorted(keys)


def test_hyperparameters_env_and_args() -> None:
    hps = {"epochs": "10", "learning-rate": "0.001", "opt": '{"b": 2, "a": "x"}', "name": "plain text",
           "sagemaker_program": '"train.py"', "sagemaker_mpi_enabled": "true", "k": "3"}
    env = sagemaker.env_vars(tenv(hetero(hyperparameters=hps), 0))
    assert env["SM_HP_EPOCHS"] == "10"
    assert env["SM_HP_LEARNING-RATE"] == "0.001"  # hyphens preserved
    assert env["SM_HP_NAME"] == "plain text"  # str raw
    assert env["SM_HP_OPT"] == '{"a":"x","b":2}'  # compact, sorted
    assert "SM_HP_SAGEMAKER_PROGRAM" not in env
    assert json.loads(env["SM_HPS"]) == {"epochs": 10, "learning-rate": 0.001, "opt": {"a": "x", "b": 2}, "name": "plain text", "k": 3}
    assert json.loads(env["SM_FRAMEWORK_PARAMS"]) == {"sagemaker_mpi_enabled": True}
    assert json.loads(env["SM_USER_ARGS"]) == ["--epochs", "10", "-k", "3", "--learning-rate", "0.001", "--name", "plain text", "--opt", "a=x,b=2"]
    assert env["SM_LOG_LEVEL"] == "20" and env["SM_NUM_CPUS"] == "4" and env["SM_NUM_GPUS"] == "0"
    assert env["SM_USER_ENTRY_POINT"] == "train.py" and env["SM_MODULE_NAME"] == "train"


def test_channels_per_group_and_dirs() -> None:
    chans = [
        Channel(name="train", source=ChannelSource(local_path="/d"), instance_groups=["data_group"], content_type="text/csv"),
        Channel(name="eval", source=ChannelSource(local_path="/d"), instance_groups=["data_group", "dnn_group"]),
        Channel(name="model", source=ChannelSource(local_path="/d"), instance_groups=["dnn_group"]),
    ]
    c = hetero(channels=chans)
    env0, env1 = sagemaker.env_vars(tenv(c, 0)), sagemaker.env_vars(tenv(c, 1))
    assert env0["SM_CHANNELS"] == '["eval","train"]' and env1["SM_CHANNELS"] == '["eval","model"]'
    assert env0["SM_CHANNEL_TRAIN"] == "/opt/ml/input/data/train" and "SM_CHANNEL_MODEL" not in env0
    assert json.loads(env0["SM_INPUT_DATA_CONFIG"])["train"] == {
        "ContentType": "text/csv", "RecordWrapperType": "None", "S3DistributionType": "FullyReplicated", "TrainingInputMode": "File"}
    dirs = {k: env0[k] for k in ("SM_MODEL_DIR", "SM_OUTPUT_DATA_DIR", "SM_OUTPUT_DIR", "SM_INPUT_DIR", "SM_INPUT_CONFIG_DIR", "SM_OUTPUT_INTERMEDIATE_DIR")}
    assert dirs == {"SM_MODEL_DIR": "/opt/ml/model", "SM_OUTPUT_DATA_DIR": "/opt/ml/output/data", "SM_OUTPUT_DIR": "/opt/ml/output",
                    "SM_INPUT_DIR": "/opt/ml/input", "SM_INPUT_CONFIG_DIR": "/opt/ml/input/config",
                    "SM_OUTPUT_INTERMEDIATE_DIR": "/opt/ml/output/intermediate"}


def test_distribution_group_and_torchrun_env() -> None:
    c = JobContract(
        job_name="j", namespace="ns", job_uid="u",
        groups=[Group(name="cpu", instance_type="ml.c5.xlarge", count=1), Group(name="gpu", instance_type="ml.p3.2xlarge", count=2)],
        target_instances=3, min_instances=3, hyperparameters={"sagemaker_distribution_instance_groups": '["gpu"]'},
    )
    t = [tenv(c, i) for i in range(3)]
    assert t[1]["distribution_hosts"] == ["algo-2", "algo-3"] and t[1]["master_hostname"] == "algo-2"
    assert [x["is_master"] for x in t] == [False, True, False]
    assert sagemaker.torchrun_env(c, c.identity(0), t[0]) == {}
    assert sagemaker.torchrun_env(c, c.identity(2), t[2]) == {
        "MASTER_ADDR": "algo-2.j-svc", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": "1", "NODE_RANK": "1",
        "GROUP_RANK": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}


def test_distribution_fallbacks() -> None:
    c = hetero()
    assert sagemaker.distribution_instance_groups(c, "dnn_group", {"sagemaker_torch_distributed_enabled": True}) == ["dnn_group"]
    assert sagemaker.distribution_instance_groups(c, "dnn_group", {}) == []
    pinned = hetero(distribution_instance_groups=["data_group"])
    assert sagemaker.distribution_instance_groups(pinned, "dnn_group", {}) == ["data_group"]


def test_write_config_files(tmp_path: Path) -> None:
    c = hetero(hyperparameters={"epochs": "3"})
    layout = Layout(tmp_path)
    sagemaker.write_config_files(layout, tenv(c, 1), c.hyperparameters)
    assert json.loads((tmp_path / "input/config/resourceconfig.json").read_text())["current_group_name"] == "dnn_group"
    assert json.loads((tmp_path / "input/config/hyperparameters.json").read_text()) == {"epochs": "3"}
    assert json.loads((tmp_path / "input/config/inputdataconfig.json").read_text()) == {}
    assert all((tmp_path / d).is_dir() for d in ("model", "output/data", "input/data"))


def test_distribution_groups_reach_hyperparameters_json_as_the_sagemaker_sdk_writes_them() -> None:
    """The toolkit takes the distribution groups from the framework parameters in hyperparameters.json, where the
    SageMaker SDK puts them; spec.distributionInstanceGroups must land there too."""
    pinned = hetero(distribution_instance_groups=["dnn_group"], hyperparameters={"epochs": "3"})
    hps = sagemaker.hyperparameters(pinned)
    assert hps == {"epochs": "3", "sagemaker_distribution_instance_groups": '["dnn_group"]'}
    t = tenv(pinned, 0)
    assert t["additional_framework_parameters"] == {"sagemaker_distribution_instance_groups": ["dnn_group"]}
    assert t["hyperparameters"] == {"epochs": 3}
    assert sagemaker.hyperparameters(hetero(hyperparameters={"epochs": "3"})) == {"epochs": "3"}
    env = sagemaker.env_vars(t)
    assert env["SAGEMAKER_BASE_DIR"] == str(LAYOUT.base)


def test_input_mode_is_recorded_as_given() -> None:
    from kubepool.contract import InputMode

    fast = Channel(name="train", source=ChannelSource(s3_uri="s3://b/p"), input_mode=InputMode.FAST_FILE)
    plain = Channel(name="eval", source=ChannelSource(s3_uri="s3://b/e"))
    config = sagemaker.input_data_config([fast, plain])
    assert config["train"]["TrainingInputMode"] == "FastFile" and config["eval"]["TrainingInputMode"] == "File"


def test_twelve_hosts_are_in_the_order_the_toolkit_documents_and_reads(tmp_path: Path) -> None:
    """algo-1..algo-12: `hosts` (and each group's) sorted lexicographically, as the toolkit's Environment says
    SageMaker writes them; the toolkit itself, reading the files written here, sees that order and algo-1 as
    its master."""
    import subprocess
    import sys

    from sagemaker_training import environment

    assert "sorted lexicographically" in " ".join((environment.Environment.__doc__ or "").split())
    c = JobContract(job_name="twelve", namespace="ns", job_uid="u", groups=[
        Group(name="a", instance_type="ml.m5.large", count=5), Group(name="b", instance_type="ml.m5.large", count=7)],
        target_instances=12, min_instances=12, entrypoint=Entrypoint(path="train.py"), mode=RunMode.SAGEMAKER)
    expected = sorted(f"algo-{n}" for n in range(1, 13))
    layout = Layout(tmp_path)
    env = sagemaker.training_env(c, c.identity(10), layout, num_cpus=1, num_gpus=0, module_dir=str(tmp_path))
    sagemaker.write_config_files(layout, env, c.hyperparameters)
    read = ("import json; from sagemaker_training import environment; e = environment.Environment(); "
            "print(json.dumps([e.hosts, e.current_instance_group_hosts, e.master_hostname]))")
    out = subprocess.run([sys.executable, "-c", read], env={"SAGEMAKER_BASE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True).stdout
    hosts, group_hosts, master = json.loads(out.splitlines()[-1])
    assert hosts == expected == env["hosts"] and master == "algo-1"
    assert group_hosts == sorted(f"algo-{n}" for n in range(6, 13))


def test_the_framework_an_estimator_asked_for_is_checked_in_the_payloads_environment() -> None:
    """PyTorch(framework_version=..., py_version=...): the image (this venv) must have them; `2.5` is any 2.5.x."""
    import os
    import sys
    from importlib.metadata import version

    from kubepool.contract import ENV_FRAMEWORK
    from kubepool.sagemaker.frameworks import framework_env

    torch = version("torch").split("+")[0]
    minor = ".".join(torch.split(".")[:2])
    py = f"py{sys.version_info[0]}{sys.version_info[1]}"
    base = {"PATH": os.environ["PATH"]}
    assert sagemaker.framework_problem(base) is None
    assert sagemaker.framework_problem({**base, **framework_env("torch", minor, py)}) is None
    assert sagemaker.framework_problem({**base, **framework_env("torch", torch, "py3")}) is None
    wrong = sagemaker.framework_problem({**base, **framework_env("torch", "1.13", "py38")})
    assert wrong is not None and f"framework_version 1.13: the image has torch {version('torch')}" in wrong
    assert f"py_version py38: the image has Python {sys.version_info[0]}.{sys.version_info[1]}." in wrong
    missing = sagemaker.framework_problem({**base, ENV_FRAMEWORK: '{"package": "tensorflow", "framework_version": "2.16"}'})
    assert missing is not None and "the image has tensorflow not installed" in missing
