"""`memupdate rl train`: check what a verl run needs, then run verl's own trainer.

    from memupdate.rl.verl.launch import plan_training
    plan = plan_training("locomo_memory_grpo", ["trainer.n_gpus_per_node=4"])   # composes + checks
    print(plan.shell_command())                                                  # what runs
    plan.run()                                                                   # python -m verl.trainer.main_ppo ...

Before verl starts (and Ray waits for GPUs), the plan checks on this machine:
- the config composes over verl's trainer config (Hydra, with the overrides);
- the parquet files exist and were written by `memupdate data preprocess`;
- the database is reachable and migrated, and every base namespace the rows fork from holds memories
  (relation rows fork nothing: they carry their rewards, and no worker gets a database URL);
and drops trajectory forks under those bases that nothing wrote for `prune_after` (leftovers of a crashed
run). The database URL reaches every Ray worker through Ray's runtime env
(`ray_kwargs.ray_init.runtime_env.env_vars.MEMUPDATE_DATABASE_URL`), with any other `MEMUPDATE_*`
setting of this shell. Paths in the config that are relative become absolute: configs relative to the
repository, data files relative to the current directory, so every worker opens the same files.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from memupdate.errors import MemupdateError

REPO = Path(__file__).resolve().parents[2]
CONFIGS_DIR = REPO / "configs"
DEFAULT_CONFIG = "locomo_memory_grpo"
DEFAULT_PRUNE_AFTER = timedelta(hours=1)
URL_ENV = "MEMUPDATE_DATABASE_URL"
RAY_ENV_PREFIX = "ray_kwargs.ray_init.runtime_env.env_vars."
# Config keys holding paths: (key, relative to) — configs ship with the repository, data is the user's.
CONFIG_PATH_KEYS = (
    "actor_rollout_ref.rollout.multi_turn.tool_config_path",
    "actor_rollout_ref.rollout.agent.agent_loop_config_path",
)
DATA_PATH_KEYS = ("data.train_files", "data.val_files")
OUTPUT_PATH_KEYS = ("trainer.default_local_dir",)


class LaunchError(MemupdateError):
    """What a training run needs is missing; the message names the thing and the fix."""


@dataclass
class TrainPlan:
    """A checked verl run: the command, its environment, the resolved config and what was checked."""

    config_dir: Path
    config_name: str
    overrides: list[str]
    config: Any  # the composed DictConfig (database URL masked)
    url: str  # the database URL the workers get (password included); "" when no row needs the database
    url_from_env: bool
    checks: list[str] = field(default_factory=list)

    def env_overrides(self, *, for_shell: bool = False, masked: bool = False) -> list[str]:
        """The settings every Ray worker gets through Ray's runtime env; for the shell, as references to
        this shell's variables (so no password is printed); `masked` hides passwords and keys."""
        from sqlalchemy.engine import make_url

        settings = {**forwarded_settings(), **({URL_ENV: self.url} if self.url else {})}
        if masked:
            settings = {k: SECRET_MASK if is_secret(k) else v for k, v in settings.items()}
            if self.url:
                settings[URL_ENV] = make_url(self.url).render_as_string(hide_password=True)
        return [
            f"++{RAY_ENV_PREFIX}{name}=" + (f"'${{{name}}}'" if for_shell else hydra_quote(value))
            for name, value in settings.items()
        ]

    def command(self) -> list[str]:
        """`python -m verl.trainer.main_ppo --config-path ... --config-name ... OVERRIDES`, as run here."""
        return [sys.executable, *self._program(), *self.overrides, *self.env_overrides()]

    def _program(self) -> list[str]:
        return [
            "-m",
            "verl.trainer.main_ppo",
            "--config-path",
            str(self.config_dir),
            "--config-name",
            self.config_name,
        ]

    def shell_command(self) -> str:
        """The command as a person runs it on the head node, one override per line; the worker settings
        are read from the shell's environment (exported first when they did not come from it)."""
        from sqlalchemy.engine import make_url

        lines = []
        if not self.url_from_env and self.url:
            url = make_url(self.url)
            note = "   # the password is not printed" if url.password else ""
            lines.append(
                f"export {URL_ENV}={shlex.quote(url.render_as_string(hide_password=bool(url.password)))}{note}"
            )
        words = [shlex.join(["python", *self._program()])]
        words += [shlex.quote(o) for o in self.overrides] + [
            f'"{o}"' for o in self.env_overrides(for_shell=True)
        ]
        lines.append(" \\\n    ".join(words))
        return "\n".join(lines)

    def config_yaml(self) -> str:
        """The composed config, interpolations resolved where verl's config allows it, secrets masked
        (it is printed, and saved beside the checkpoints)."""
        import yaml
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        try:
            container = OmegaConf.to_container(self.config, resolve=True)
        except OmegaConfBaseException:  # a mandatory `???` value verl fills in at run time
            container = OmegaConf.to_container(self.config, resolve=False)
        return yaml.safe_dump(mask_secrets(container), sort_keys=False, width=120)

    @property
    def checkpoint_dir(self) -> Path:
        return Path(self.config.trainer.default_local_dir)

    def save_config(self) -> Path:
        """Write the resolved config beside the checkpoints, where `memupdate rl export` reads it."""
        from memupdate.rl.verl.export import TRAIN_CONFIG_FILE

        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        path = self.checkpoint_dir / TRAIN_CONFIG_FILE
        path.write_text(self.config_yaml())
        return path

    def run(self) -> int:
        """Save the config, then run verl's trainer in this terminal; returns its exit code."""
        self.save_config()
        env = {**os.environ, **({URL_ENV: self.url} if self.url else {})}
        return subprocess.run(self.command(), env=env).returncode


SECRET_MASK = "***"
_SECRET_WORDS = ("password", "api_key", "apikey", "secret", "token")


def is_secret(name: str) -> bool:
    """Whether a setting or config key names a credential (its value is never printed or saved)."""
    lowered = name.lower()
    return (
        any(word in lowered for word in _SECRET_WORDS)
        and "tokenizer" not in lowered
        and "tokens" not in lowered
    )


def mask_secrets(value: Any, key: str = "") -> Any:
    """`value` (a config as plain containers) with the values of credential keys replaced by ***."""
    if isinstance(value, dict):
        return {k: mask_secrets(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v, key) for v in value]
    return SECRET_MASK if value is not None and is_secret(key) else value


def hydra_quote(value: str) -> str:
    """A string as a quoted Hydra override value (URLs hold `=`, `?`, `@` that Hydra would parse)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def forwarded_settings() -> dict[str, str]:
    """This shell's `MEMUPDATE_*` settings (embedding model, budgets ...) that workers must share."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("MEMUPDATE_") and k != URL_ENV}


def find_config(name: str) -> tuple[Path, str]:
    """(config dir, config name) for a name in `configs/` or a path to a YAML file."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path.resolve().parent, path.stem
    if (CONFIGS_DIR / f"{name}.yaml").is_file():
        return CONFIGS_DIR, name
    known = sorted(p.stem for p in CONFIGS_DIR.glob("*.yaml") if p.stem != "agent_loop")
    raise LaunchError(
        f"no training config {name!r}: choose one of {', '.join(known) or '(none found)'} in {CONFIGS_DIR}, or give a .yaml path"
    )


def compose_config(config_dir: Path, name: str, overrides: Sequence[str]) -> Any:
    """The config as verl's entry point composes it (Hydra, search path from the file)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            return compose(config_name=name, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as exc:
        raise LaunchError(
            f"config {name!r} with overrides {list(overrides)} does not compose: {exc}"
        ) from None


def path_overrides(config: Any, user_overrides: Sequence[str]) -> list[str]:
    """Absolute paths for the config's relative ones, unless the user set the key."""
    from omegaconf import OmegaConf

    given = {o.lstrip("+~").split("=", 1)[0] for o in user_overrides}
    fixed = []
    for keys, root in ((CONFIG_PATH_KEYS, REPO), (DATA_PATH_KEYS + OUTPUT_PATH_KEYS, Path.cwd())):
        for key in keys:
            value = OmegaConf.select(config, key)
            if key in given or value is None:
                continue
            paths = [value] if isinstance(value, str) else list(value)
            absolute = [str((root / Path(p).expanduser()).resolve()) for p in paths]
            fixed.append(f"{key}={absolute[0] if isinstance(value, str) else '[' + ','.join(absolute) + ']'}")
    return fixed


def data_files(config: Any) -> list[Path]:
    """The dataset files of the config, relative ones taken from the current directory."""
    files = []
    for key in DATA_PATH_KEYS:
        value = config.data[key.split(".", 1)[1]]
        files += [Path(v).expanduser().resolve() for v in ([value] if isinstance(value, str) else value)]
    return files


def check_data(files: Sequence[Path]) -> list[str]:
    """The base namespaces the rows fork from (none for relation rows); LaunchError naming a missing or
    foreign file."""
    import pyarrow.parquet as pq

    from memupdate.rl.data.relation_rows import is_relation_row

    bases: set[str] = set()
    for path in files:
        if not path.is_file():
            raise LaunchError(
                f"dataset file {path} does not exist: write it with `memupdate data preprocess --locomo FILE "
                f"--out {path.parent}` (add --task compaction or --task relation for those configs), or set data.train_files / data.val_files"
            )
        table = pq.read_table(path, columns=["extra_info"])
        rows = table.column("extra_info").to_pylist()
        # A relation row carries its rewards: no bank to fork, no tools.
        rows_on_banks = [row for row in rows if not is_relation_row(row or {})]
        missing = [
            i
            for i, row in enumerate(rows_on_banks)
            if not (row or {}).get("base_namespace") or not (row or {}).get("tools_kwargs")
        ]
        if not rows or missing:
            raise LaunchError(
                f"dataset file {path} has {len(rows)} rows, {len(missing)} without extra_info.base_namespace/tools_kwargs: "
                "it was not written by `memupdate data preprocess`; write it again"
            )
        bases |= {row["base_namespace"] for row in rows_on_banks}
    return sorted(bases)


def check_database(
    url: str | None, bases: Sequence[str], prune_after: timedelta | None, *, dry_run: bool = False
) -> tuple[str, list[str]]:
    """(the URL workers get, what was done); LaunchError when the database is unreachable, not migrated,
    or lacks a base namespace. Leftover forks under the bases are pruned when `prune_after` is set
    (only counted on a dry run)."""
    from memupdate.migrations.schema import current_revision, head_revision
    from memupdate.rl.leftover_forks import list_forks, prune_forks
    from memupdate.store import MemoryStore, get_embedder, get_engine

    engine = get_engine(url)  # DatabaseError (unreachable) names the URL and the fix
    shown = engine.url.render_as_string(hide_password=True)
    if current_revision(engine) != head_revision():
        raise LaunchError(
            f"database {shown} is at revision {current_revision(engine)}, not {head_revision()}: run `memupdate db upgrade`"
        )
    root = MemoryStore(engine, get_embedder(), ("memupdate",))
    counts = root.list_namespaces(with_counts=True)
    empty = [b for b in bases if counts.get(tuple(b.split("/")), 0) == 0]
    if empty:
        locomo = [b for b in empty if not b.startswith("factconsolidation/")]
        ids = ",".join(b.split("/")[-1] for b in locomo)
        hints = [f"`memupdate data load --locomo FILE --conversations {ids}`"] if locomo else []
        if len(locomo) < len(empty):  # FactConsolidation's training banks are loaded by the preprocessing
            hints.append("`memupdate data preprocess --task compaction --factconsolidation FILE --out DIR`")
        raise LaunchError(
            f"{len(empty)} base namespace(s) the dataset forks from hold no memories in {shown}: {', '.join(empty[:8])}"
            f"{' ...' if len(empty) > 8 else ''}. Load them: {' and '.join(hints)}"
        )
    done = [f"database {shown}: migrated, {len(bases)} base namespaces loaded"]
    if prune_after is not None and dry_run:
        stale = [f for base in bases for f in list_forks(root, base) if f.age() >= prune_after]
        done.append(f"would drop {len(stale)} leftover trajectory forks not written for {prune_after}")
    elif prune_after is not None:
        pruned = [f for base in bases for f in prune_forks(root, prune_after, prefix=base)]
        done.append(f"dropped {len(pruned)} leftover trajectory forks not written for {prune_after}")
    return engine.url.render_as_string(hide_password=False), done


def check_reachable_from_nodes(url: str, nnodes: int) -> None:
    """LaunchError when several nodes would train against a database only this machine reaches."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    socket = str(parsed.query.get("host", "")).startswith("/")
    local = socket or (parsed.host in (None, "", "localhost", "127.0.0.1", "::1") and "host" not in parsed.query)
    if nnodes > 1 and local:
        raise LaunchError(
            f"trainer.nnodes={nnodes} but the database {parsed.render_as_string(hide_password=True)} is only reachable "
            "on this machine (the embedded server or a local socket): set MEMUPDATE_DATABASE_URL to a PostgreSQL "
            "server every node reaches"
        )


def plan_training(
    config: str = DEFAULT_CONFIG,
    overrides: Sequence[str] = (),
    *,
    url: str | None = None,
    prune_after: timedelta | None = DEFAULT_PRUNE_AFTER,
    dry_run: bool = False,
) -> TrainPlan:
    """Compose and check a verl run (see the module docstring); nothing is started, and on a dry run
    nothing is changed."""
    config_dir, name = find_config(config)
    overrides = list(overrides)
    composed = compose_config(config_dir, name, overrides)
    overrides += path_overrides(composed, overrides)
    bases = check_data(data_files(composed))
    # The printed command reads the URL from $MEMUPDATE_DATABASE_URL; say what to export when it came elsewhere.
    url_from_env = url is None and bool(os.environ.get(URL_ENV))
    if bases:
        worker_url, checks = check_database(url, bases, prune_after, dry_run=dry_run)
        check_reachable_from_nodes(worker_url, int(composed.trainer.nnodes))
    else:  # relation rows only: the rows carry their rewards, no worker opens the database
        worker_url, url_from_env, checks = "", False, ["database: not needed (the rows carry their rewards)"]
    checks = [f"data: {len(bases)} base namespaces in {len(data_files(composed))} files", *checks]
    plan = TrainPlan(config_dir, name, overrides, None, worker_url, url_from_env, checks)
    plan.config = compose_config(config_dir, name, [*overrides, *plan.env_overrides(masked=True)])
    return plan
