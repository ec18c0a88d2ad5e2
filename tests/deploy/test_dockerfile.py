"""deploy/Dockerfile keeps the invariants the Helm chart relies on (no Docker here, so the file is read).

- the final stage runs as the numeric uid 10001 (Kubernetes can verify runAsNonRoot only for a number);
- it installs nothing: no pip, apt or compiler, only the virtualenv copied from the build stage;
- it writes nothing outside /tmp (no bytecode at run time; HOME, TMPDIR and the workdir are /tmp);
- the build stage copies every package pyproject.toml ships, with no pip cache;
- the build context (deploy/Dockerfile.dockerignore) admits only what the image copies;
- the image's Python is the line the code is type-checked for (ADR 0017, "The ninth session").
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / "deploy" / "Dockerfile.dockerignore"


@dataclass(slots=True)
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def _instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) of every instruction, continuation lines joined, comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    return [(kw.upper(), args.strip()) for kw, _, args in (line.partition(" ") for line in lines)]


def _stages() -> list[Stage]:
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for keyword, value in _instructions(DOCKERFILE.read_text(encoding="utf-8")):
        if keyword == "ARG" and not stages:
            name, _, default = value.partition("=")
            args[name] = default
        elif keyword == "FROM":
            base, _, name = value.partition(" AS ")
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
            stages.append(Stage(base, name.strip() or None))
        else:
            stages[-1].instructions.append((keyword, value))
    return stages


def test_multi_stage_on_slim_python() -> None:
    stages = _stages()
    assert len(stages) == 2
    for stage in stages:
        assert re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?", stage.base), stage.base


def test_image_runs_the_python_line_the_code_is_checked_for() -> None:
    """The shipped interpreter is the one mypy checks against and the suite runs on, not a newer line that
    is neither tested nor, for this gateway, faster (3.12: ~11 % more instructions per call)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    checked = pyproject["tool"]["mypy"]["python_version"]
    for stage in _stages():
        assert stage.base.startswith(f"python:{checked}-"), (stage.base, checked)


def test_final_stage_runs_as_uid_10001() -> None:
    final = _stages()[-1]
    assert final.all("USER") == ["10001:10001"]
    [create] = [run for run in final.all("RUN") if "useradd" in run]
    assert "--uid 10001" in create and "--gid 10001" in create


def test_final_stage_installs_nothing() -> None:
    build, final = _stages()
    for run in final.all("RUN"):
        assert not re.search(r"\b(pip|apt-get|apt|apk|gcc|make)\b", run), run
    assert final.all("COPY") == [f"--from={build.name} /opt/switchboard /opt/switchboard"]
    installs = [run for run in build.all("RUN") if re.search(r"\bpip\b.*\binstall\b", run)]
    assert installs and all("--no-cache-dir" in run for run in installs)


def test_final_stage_writes_only_under_tmp() -> None:
    final = _stages()[-1]
    env = " ".join(final.all("ENV"))
    for setting in ("PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp", "TMPDIR=/tmp"):
        assert setting in env
    assert final.all("WORKDIR") == ["/tmp"]
    assert final.all("ENTRYPOINT") == ['["switchboard"]']
    assert final.all("CMD") == ['["run", "-c", "/etc/switchboard/config.yaml"]']


def test_build_stage_copies_every_shipped_package() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    build = _stages()[0]
    copied = {args.split()[0] for args in build.all("COPY")}
    assert packages <= copied, packages - copied
    ignore = [line for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines() if line and line[0] != "#"]
    assert ignore[0] == "**"  # everything is left out but what is named after
    for source in copied:
        assert f"!{source}" in ignore or f"!{source}/**" in ignore, source
