"""SageMaker script mode as the SageMaker Python SDK sends it and the framework containers' training toolkit
(`sagemaker_training`: entry_point.run, files.download_and_extract, modules, process) runs it.

The SDK uploads the source dir as a tarball and names it in the hyperparameters, each value JSON-encoded:
`sagemaker_submit_directory` (the tarball's s3:// URI, or a local path: the network-isolated `code` channel),
`sagemaker_program` (the entry point, relative to the source dir), `sagemaker_region` and
`sagemaker_container_log_level`. Every instance extracts the tarball into /opt/ml/code, installs its
requirements.txt (into the job-private prefix of pipRequirements, never the image), and runs the program there:
a .py file as a Python program (in the launcher, so its exception is the job's failure reason), a source dir with
setup.py as an installed package (`python -m`), anything else (.sh) as a command.
"""

from __future__ import annotations

import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kubepool.contract import Entrypoint, JobContract, RunMode
from kubepool.runtime import channels, pip, sagemaker

SUBMIT_DIR_HP = "sagemaker_submit_directory"
PROGRAM_HP = "sagemaker_program"
REGION_HP = "sagemaker_region"
LOG_LEVEL_HP = "sagemaker_container_log_level"
JOB_NAME_HP = "sagemaker_job_name"
REQUIREMENTS = "requirements.txt"
SETUP_PY = "setup.py"
# The toolkit's own S3 endpoint variable (params.S3_ENDPOINT_URL), before the channels' rule.
ENV_TOOLKIT_S3_ENDPOINT = "S3_ENDPOINT_URL"
INFO = 20  # logging.INFO: the toolkit's default container log level

# The toolkit's entry point rule (process.validate_entry_point): a plain relative path inside the code dir.
_SAFE_ENTRY_POINT = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._+-]*(/[A-Za-z0-9._+-]+)*$")


class ScriptModeError(ValueError):
    """The script-mode hyperparameters or the source dir cannot be run as the toolkit would run them."""


@dataclass(frozen=True)
class ScriptMode:
    """What the hyperparameters ask for (decoded as the toolkit's read_hyperparameters does)."""

    program: str
    submit_dir: str | None
    region: str | None
    log_level: int
    job_name: str


def _text(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise ScriptModeError(f"hyperparameter {name} must be a string (JSON-encoded as the SDK sends it), "
                              f"got {value!r}")
    return value


def validate_program(program: str) -> str:
    """The toolkit's validate_entry_point: not empty, no leading '-' or '/', only letters, digits and `._+-/`, no
    `.`/`..` segments; the program is run from the code dir and must stay inside it."""
    if not program:
        raise ScriptModeError("the training entry point (sagemaker_program) is empty: name the script to run, "
                              "relative to the source dir, e.g. train.py")
    if not _SAFE_ENTRY_POINT.match(program) or any(p in (".", "..") for p in program.split("/")):
        raise ScriptModeError(f"the training entry point (sagemaker_program) {program!r} is not a plain relative "
                              "path inside the source dir (letters, digits, '.', '_', '+', '-', '/'; no leading "
                              "'-' or '/', no '.' or '..' parts)")
    return program


def parse(raw: Mapping[str, str]) -> ScriptMode | None:
    """Script mode from the job's hyperparameters; None when they name no program (not script mode).
    A source dir without a program is refused (the toolkit fails the same way: its entry point is empty)."""
    decoded = sagemaker.decode_hyperparameters(raw)
    if PROGRAM_HP not in decoded:
        if SUBMIT_DIR_HP in decoded:
            raise ScriptModeError(f"hyperparameter {SUBMIT_DIR_HP} is set without {PROGRAM_HP}: name the script "
                                  "to run from the source dir")
        return None
    submit = decoded.get(SUBMIT_DIR_HP)
    region = decoded.get(REGION_HP)
    level = decoded.get(LOG_LEVEL_HP, INFO)
    if isinstance(level, bool) or not isinstance(level, int):
        raise ScriptModeError(f"hyperparameter {LOG_LEVEL_HP} must be a logging level number, got {level!r}")
    return ScriptMode(
        program=validate_program(_text(decoded[PROGRAM_HP], PROGRAM_HP)),
        submit_dir=None if submit is None else _text(submit, SUBMIT_DIR_HP),
        region=None if region is None else _text(region, REGION_HP),
        log_level=level,
        job_name=str(decoded.get(JOB_NAME_HP, "")),
    )


def of(contract: JobContract) -> ScriptMode | None:
    """Script mode of a job: SageMaker mode and a program in its hyperparameters. Its entrypoint must be that
    program (what the SageMaker API server writes); a job naming something else is refused, not half-honoured."""
    if contract.mode is not RunMode.SAGEMAKER:
        return None
    sm = parse(contract.hyperparameters)
    if sm is None:
        return None
    ep = contract.entrypoint
    if ep.module or ep.command or ep.function or (ep.path and ep.path != sm.program):
        named = ep.path or ep.module or ep.function or " ".join(ep.command or [])
        raise ScriptModeError(f"hyperparameter {PROGRAM_HP} is {sm.program!r} but the entrypoint names {named!r}: "
                              f"in script mode the entrypoint is the program (entrypoint.file: {sm.program})")
    return sm


def _normalized(name: str) -> str:
    """The toolkit's member-name rule: drop empty, `.` and `..` segments, so `../../x` lands at `x`."""
    return "/".join(p for p in name.replace("\\", "/").split("/") if p not in ("", ".", ".."))


def _inside(root: str, target: str) -> bool:
    return target == root or target.startswith(root + os.sep)


def member_filter(dest: Path) -> Callable[[tarfile.TarInfo, str], tarfile.TarInfo | None]:
    """A tarfile extraction filter with the toolkit's rules (files._sanitize_member): names normalized into the
    code dir; special files and links pointing outside skipped; then the standard library's data filter (no
    setuid bits, no ownership)."""
    root = os.path.realpath(dest)

    def keep(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        name = _normalized(member.name)  # one that normalizes to nothing is the code dir: tarfile leaves it alone
        member = member.replace(name=name, deep=False)
        target = os.path.realpath(os.path.join(root, name))
        if member.ischr() or member.isblk() or member.isfifo() or member.isdev():  # no place in a source dir
            return None
        if member.issym() or member.islnk():
            base = root if member.islnk() else os.path.dirname(target)
            if not _inside(root, os.path.realpath(os.path.join(base, member.linkname))):
                return None
        return tarfile.data_filter(member, path)

    return keep


def extract(tarball: Path, dest: Path) -> None:
    with tarfile.open(tarball, mode="r:gz") as t:
        t.extractall(dest, filter=member_filter(dest))


def job_s3_endpoint(contract: JobContract) -> str | None:
    """The S3 endpoint the job's own locations name (its output, checkpoints, channels: the platform team's data
    settings): the SDK uploads the source dir beside them, so it is read from there too."""
    targets = [contract.output, contract.checkpoint_s3, *(c.source for c in contract.channels)]
    return next((t.s3_endpoint_url for t in targets if t is not None and t.s3_endpoint_url), None)


def s3_endpoint(env: Mapping[str, str], job_endpoint: str | None) -> str | None:
    """The toolkit's S3_ENDPOINT_URL, else the job's own endpoint, else the channels' AWS_ENDPOINT_URL (boto3
    itself reads AWS_ENDPOINT_URL_S3 when none is set)."""
    return env.get(ENV_TOOLKIT_S3_ENDPOINT) or job_endpoint or env.get(channels.ENV_S3_ENDPOINT) or None


def download(uri: str, dst: Path, region: str | None, endpoint: str | None, env: Mapping[str, str]) -> None:
    """The source tarball with the instance's S3 credentials (as channels are fetched), in the job's region
    (sagemaker_region) unless the instance names its own (AWS_REGION, as the toolkit's s3_download)."""
    import boto3  # the runtime image has it; the operator never imports this module

    bucket, key = channels.parse_s3_uri(uri)
    client = boto3.client("s3", endpoint_url=endpoint, region_name=env.get("AWS_REGION") or region)
    client.download_file(bucket, key, str(dst))


def fetch(sm: ScriptMode, submit_dir: str, code_dir: Path, env: Mapping[str, str],
          job_endpoint: str | None = None) -> str:
    """The toolkit's download_and_extract of the submit dir into the code dir: an s3:// tarball, or a local
    tarball, directory or file. A code dir that already has files (the instance run again in its pod) is kept.
    Returns what was done."""
    code_dir.mkdir(parents=True, exist_ok=True)
    if any(code_dir.iterdir()):
        return f"{code_dir} already holds the source dir"
    local = Path(submit_dir)
    if submit_dir.startswith("s3://"):
        with tempfile.TemporaryDirectory() as tmp:
            tarball = Path(tmp) / "sourcedir.tar.gz"
            download(submit_dir, tarball, sm.region, s3_endpoint(env, job_endpoint), env)
            extract(tarball, code_dir)
    elif local.is_dir():
        shutil.copytree(local, code_dir, dirs_exist_ok=True)
    elif local.is_file() and tarfile.is_tarfile(local):
        extract(local, code_dir)
    elif local.is_file():
        shutil.copy2(local, code_dir)
    else:
        raise ScriptModeError(f"{SUBMIT_DIR_HP} {submit_dir!r} is neither an s3:// URI nor a path on the instance")
    return f"{submit_dir} extracted into {code_dir}"


def is_package(code_dir: Path, program: str) -> bool:
    """The toolkit's _entry_point_type: .sh is a command, whatever the dir holds; else a setup.py makes a package."""
    return not program.endswith(".sh") and (code_dir / SETUP_PY).is_file()


def is_python_program(code_dir: Path, program: str) -> bool:
    return program.endswith(".py") and not is_package(code_dir, program)


def install(sm: ScriptMode, code_dir: Path, prefix: Path, env: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """The toolkit's entry_point.install: a package is pip-installed with its requirements.txt, a Python program's
    requirements.txt is installed; a command gets nothing installed, only the right to execute. Into the
    job-private prefix (pip.install). Returns the environment that sees them and what pip did (None: nothing)."""
    requirements = code_dir / REQUIREMENTS
    files = [requirements] if requirements.is_file() else []
    if is_package(code_dir, sm.program):
        return pip.install([str(code_dir)], prefix, env, files, cwd=code_dir)
    if is_python_program(code_dir, sm.program):
        return pip.install([], prefix, env, files, cwd=code_dir) if files else (dict(env), None)
    program = code_dir / sm.program
    if not program.is_file():
        raise ScriptModeError(f"the training entry point {sm.program!r} is not in the source dir")
    program.chmod(program.stat().st_mode | 0o111)
    return dict(env), None


def entrypoint(sm: ScriptMode, code_dir: Path, args: list[str]) -> Entrypoint:
    """How the toolkit's ProcessRunner runs the program (_create_command): a package as `python -m` its name less
    .py, a .py file as a Python program, anything else through the shell as `./program args`."""
    if is_package(code_dir, sm.program):
        return Entrypoint(module=re.sub(r"\.py$", "", sm.program), args=args)
    if is_python_program(code_dir, sm.program):
        return Entrypoint(path=sm.program, args=args)
    return Entrypoint(command=["/bin/sh", "-c", './"$0" "$@"', sm.program], args=args)


def environment(sm: ScriptMode, env: Mapping[str, str]) -> dict[str, str]:
    """What the toolkit's Environment() puts in the script's environment beyond SM_*: SAGEMAKER_REGION and
    SAGEMAKER_JOB_NAME; the region also becomes AWS_REGION/AWS_DEFAULT_REGION where the instance has none (the
    AWS SDKs in the script then talk to the job's region, as on SageMaker)."""
    out = {"SAGEMAKER_JOB_NAME": sm.job_name, "SAGEMAKER_REGION": sm.region or ""}
    if sm.region:
        for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
            if not env.get(var):
                out[var] = sm.region
    return out


def module_name(program: str) -> str:
    """The toolkit's Environment._parse_module_name: the program less a trailing .py."""
    return program[:-3] if program.endswith(".py") else program


def says(sm: ScriptMode, level: int = INFO) -> bool:
    """Whether a runtime line at `level` is shown under the job's sagemaker_container_log_level."""
    return level >= sm.log_level


def training_entry(sm: ScriptMode, code_dir: Path) -> dict[str, str]:
    """The toolkit's user_entry_point, module_name and module_dir (the submit dir as given, else the code dir)."""
    return {"user_entry_point": sm.program, "module_name": module_name(sm.program),
            "module_dir": sm.submit_dir or str(code_dir)}
