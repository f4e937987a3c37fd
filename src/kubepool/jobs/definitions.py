"""`MLJobDefinition` (Snowflake's): a job registered once and run many times, each call a new MLJob.

Its code is a stored payload (`bundles.store`, kind `job-definition`) that every run mounts; a definition of a
Python function ships the function and that call's arguments with each run instead (as `@remote` does). How a
call's arguments reach a script is its `arg_protocol`: NONE (positional arguments, as strings, after
`default_args`), CLI (`default_args` merged with the call's, keywords as `--key value`), PICKLE (a function's own
arguments, by value)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from kubepool import naming
from kubepool.api import CodeSource, Entrypoint
from kubepool.jobs.bundles import load, local_payload, run_from, store, template_of
from kubepool.jobs.decorators import RUNNER_FILE, RUNNER_FUNCTION, refuse_parallel_function, remote_payload
from kubepool.jobs.job import MLJob
from kubepool.jobs.options import Import, resolve_image, take_snowflake_options
from kubepool.jobs.spec import check_name, generate_name
from kubepool.jobs.submission import connect, imports_of, warn_unknown, with_imports


class ArgProtocol(Enum):
    NONE = 0
    CLI = 1
    PICKLE = 2


def cli_arguments(defaults: Sequence[Any] | None, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[str]:
    """Snowflake's CLI protocol (pure): the call's positional arguments, then `defaults`' positional ones, then
    `--key value` flags of `defaults` overridden by the call's keywords (a flag without a value stays bare)."""
    positional = [str(a) for a in args]
    flags: dict[str, Any] = {}
    items = list(defaults or ())
    i = 0
    while i < len(items):
        arg = items[i]
        if isinstance(arg, str) and arg.startswith("--"):
            has_value = i + 1 < len(items) and not (isinstance(items[i + 1], str) and str(items[i + 1]).startswith("--"))
            flags[arg[2:]] = items[i + 1] if has_value else None
            i += 2 if has_value else 1
            continue
        positional.append(str(arg))
        i += 1
    flags.update(kwargs)
    out = positional
    for key, value in flags.items():
        out += [f"--{key}"] if value is None and key not in kwargs else [f"--{key}", str(value)]
    return out


def script_args(rest: dict[str, Any], args: Sequence[Any] | None) -> list[Any]:
    """A script submission's argv from Snowflake's `arg_protocol`/`default_args` options (popped from `rest`): with
    CLI, `default_args` merged as a definition's run merges them (`cli_arguments`); `overwrite` has nothing to
    replace (a submission registers no definition).

    Raises:
        ValueError: `default_args` without ArgProtocol.CLI (Snowflake drops them there), PICKLE for a script, or
            `overwrite=True`.
    """
    protocol = rest.pop("arg_protocol", ArgProtocol.NONE)
    protocol = protocol if isinstance(protocol, ArgProtocol) else ArgProtocol[str(protocol).upper()]
    defaults = rest.pop("default_args", None)
    if rest.pop("overwrite", False):
        raise ValueError("overwrite replaces a registered job definition; a submission registers none on kubepool "
                         "(each run is a new MLJob): use MLJobDefinition(..., overwrite=True)")
    if protocol is ArgProtocol.PICKLE:
        raise ValueError("arg_protocol PICKLE passes Python arguments to a function; this job runs a script: use CLI")
    if protocol is ArgProtocol.CLI:
        return cli_arguments(defaults, args or (), {})
    if defaults:
        raise ValueError("default_args are passed with arg_protocol=ArgProtocol.CLI only (Snowflake drops them "
                         "otherwise): set arg_protocol, or put them in args")
    return list(args or ())


def refuse_script_options(rest: dict[str, Any]) -> None:
    """A function payload's (@remote) refusals of the script options Snowflake's option parsing also takes.

    Raises:
        ValueError: `entrypoint`, `default_args` or `overwrite=True` given.
    """
    for key, why in (("entrypoint", "a function is its own entrypoint"),
                     ("default_args", "a function's arguments are its call's"),
                     ("overwrite", "each call is a new MLJob: there is no definition to replace")):
        if rest.pop(key, None):
            raise ValueError(f"{key} is not supported for a function (@remote): {why}")


class MLJobDefinition:
    """A job registered once, run by calling it (Snowflake's `MLJobDefinition`).

    Args:
        source: A local .py file or directory, or a Python function.
        compute_pool: ComputePool of its jobs.
        stage_name: Snowflake's upload stage; kept as the annotation kubepool.dev/stage-name of each run (the code
            is stored in a ConfigMap).
        session, namespace: The cluster connection and namespace.
        name: The definition's name (default `<stem>-<8 hex>`); its jobs are `<name>-<8 hex>`.
        target_instances, min_instances, parallel, env_vars, pip_requirements, imports, runtime_environment,
        image, spec_overrides: As in `submit_file`, for every run.
        entrypoint: The file of a directory source to run, or a command as a list; default the file itself, or
            a directory's only top-level .py file.
        overwrite: Replace a definition of the same name (else registering it again fails).
        arg_protocol: How a call's arguments reach the job (module docstring); PICKLE only for a function.
        default_args: Arguments every run starts from.
        **kwargs: Snowflake's options (`options.take_snowflake_options`): each honoured or refused; a function
            with `parallel=True` is refused as Snowflake refuses it.
    """

    def __init__(self, source: str | Path | Callable[..., Any], compute_pool: str, stage_name: str | None = None,
                 session: Any = None, name: str | None = None, target_instances: int = 1, min_instances: int | None = None,
                 parallel: bool = False, env_vars: dict[str, str] | None = None, runtime_environment: str | None = None,
                 overwrite: bool = False, arg_protocol: ArgProtocol | str = ArgProtocol.NONE,
                 default_args: list[Any] | None = None, *, entrypoint: str | list[str] | None = None,
                 pip_requirements: list[str] | None = None, imports: Sequence[Import] | None = None,
                 image: str | None = None, namespace: str | None = None,
                 spec_overrides: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        rest = {**kwargs, "stage_name": stage_name}
        sf = take_snowflake_options(rest, target_instances=target_instances, namespace=namespace)
        imports = imports_of(imports, rest)
        warn_unknown(rest)
        if callable(source):
            refuse_parallel_function(parallel)
        self._annotations = sf.annotations
        self.source, self.compute_pool = source, compute_pool
        self.kube = connect(sf.namespace, session=session)
        self.namespace = sf.namespace or self.kube.namespace
        self.arg_protocol = arg_protocol if isinstance(arg_protocol, ArgProtocol) else ArgProtocol[arg_protocol.upper()]
        if self.arg_protocol is ArgProtocol.PICKLE and not callable(source):
            raise ValueError("arg_protocol PICKLE passes Python arguments to a function; this definition runs a script: use CLI")
        self.default_args = list(default_args or ())
        stem = source.__name__ if callable(source) else Path(source).stem
        self.name = check_name(name or generate_name(stem))
        self.overwrite, self.imports, self.entrypoint = overwrite, imports, entrypoint
        image = resolve_image(image, runtime_environment, lambda: self.kube.get_pool(compute_pool).spec.image)
        self._template = template_of(compute_pool=compute_pool, target_instances=sf.target_instances,
                                     min_instances=min_instances, pip_requirements=pip_requirements,
                                     env_vars=env_vars, image=image, parallel=parallel,
                                     spec_overrides=spec_overrides)
        self._registered = False

    @classmethod
    def register(cls, source: str | Path | Callable[..., Any], compute_pool: str, stage_name: str | None = None,
                 session: Any = None, **kwargs: Any) -> MLJobDefinition:
        """Create and register a definition at once."""
        definition = cls(source, compute_pool, stage_name, session, **kwargs)
        definition._register()
        return definition

    def _script(self) -> tuple[list[Any], Entrypoint]:
        files = with_imports(local_payload(self.source), self.imports)  # type: ignore[arg-type]
        if isinstance(self.entrypoint, list):
            return files, Entrypoint(command=self.entrypoint)
        tops = sorted(f.path for f in files if "/" not in f.path and f.path.endswith(".py"))
        entry = self.entrypoint or (Path(self.source).name if Path(self.source).is_file() else  # type: ignore[arg-type]
                                    tops[0] if len(tops) == 1 else None)
        if entry is None or entry not in {f.path for f in files}:
            raise ValueError(f"entrypoint {entry!r} is not a file of {self.source}: name one of {tops}")
        return files, Entrypoint(file=entry)

    def _register(self) -> None:
        if self._registered:
            return
        if not self.overwrite:
            try:
                load(self.kube, naming.STORED_JOB_DEFINITION, self.name, self.namespace)
            except ValueError:
                pass
            else:
                raise ValueError(f"job definition {self.namespace}/{self.name} exists: pass overwrite=True to replace it")
        if callable(self.source):
            files: list[Any] = []
            self._entry = Entrypoint(file=RUNNER_FILE, function=RUNNER_FUNCTION)
        else:
            files, self._entry = self._script()
        store(self.kube, naming.STORED_JOB_DEFINITION, self.name, self.namespace, files, self._template, replace=True)
        self._registered = True

    def __call__(self, *args: Any, **kwargs: Any) -> MLJob:
        """Run the definition once; returns the new job's handle."""
        self._register()
        job = generate_name(self.name)
        if callable(self.source):
            return run_from(self.kube, self._template, name=job, namespace=self.namespace, entrypoint=self._entry,
                            args=(), code=None, files=with_imports(remote_payload(self.source, args, kwargs), self.imports),
                            annotations=self._annotations)
        if self.arg_protocol is ArgProtocol.NONE and kwargs:
            raise ValueError(f"keyword arguments are not supported with {self.arg_protocol} (use ArgProtocol.CLI)")
        argv = (cli_arguments(self.default_args, args, kwargs) if self.arg_protocol is ArgProtocol.CLI
                else [str(a) for a in [*self.default_args, *args]])
        return run_from(self.kube, self._template, name=job, namespace=self.namespace, entrypoint=self._entry,
                        args=argv, code=CodeSource(config_map=self.name), annotations=self._annotations)

    def delete(self) -> None:
        """Delete the stored definition; its jobs keep running."""
        if self._registered:
            self.kube.delete_configmap(self.name, self.namespace)
            self._registered = False
