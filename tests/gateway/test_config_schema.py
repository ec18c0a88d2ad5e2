"""``switchboard schema``: the config's JSON Schema, the committed copy editors use, and every config
file in the repository validated against it (with the ``jsonschema`` package, draft 2020-12)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gateway.config import ConfigError, parse_config
from gateway.config_schema import config_schema, schema_text
from tests.support import PROJECT_ROOT

COMMITTED = PROJECT_ROOT / "deploy" / "switchboard.schema.json"
EXAMPLES = sorted((PROJECT_ROOT / "deploy" / "examples").glob("*.yaml"))
HEADER = "# yaml-language-server: $schema="
# Other Switchboard configs: the benchmark's template, and the `config:` of the Helm chart's value sets.
OTHER_CONFIGS = [PROJECT_ROOT / "bench" / "configs" / "switchboard.yaml"]
HELM_VALUES = [
    PROJECT_ROOT / "deploy" / "helm" / "switchboard" / "values.yaml",
    *sorted((PROJECT_ROOT / "deploy" / "helm" / "examples").glob("*.yaml")),
]


def _validator() -> jsonschema.protocols.Validator:
    schema = config_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(document: Any) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator().iter_errors(document)]


def test_the_committed_schema_is_current() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == schema_text(), (
        f"{COMMITTED.relative_to(PROJECT_ROOT)} is stale: the config model changed. Regenerate it with "
        "`make schema` (python -m gateway schema --output deploy/switchboard.schema.json) and commit it"
    )


def test_the_schema_is_draft_2020_12_and_describes_every_key() -> None:
    schema = config_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] and schema["title"] == "Switchboard configuration"
    nodes = [("Config", schema), *schema["$defs"].items()]
    undescribed = [
        f"{model}.{key}"
        for model, node in nodes
        for key, prop in node.get("properties", {}).items()
        if "description" not in prop
    ]
    assert undescribed == [], "every key is described (editors show it on hover)"
    for section in ("telemetry", "logging", "ui", "backends", "mgp", "mcpc"):
        assert section in schema["properties"], section


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_config_validates_and_names_the_schema(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    first = text.splitlines()[0]
    assert first.startswith(HEADER), f"{path.name}: the first line names the schema for editors"
    assert (path.parent / first.removeprefix(HEADER)).resolve() == COMMITTED.resolve()
    assert _errors(yaml.safe_load(text)) == []
    parse_config(text, str(path), environ={})  # and the model agrees (defaults fill ${NAME:-...})


@pytest.mark.parametrize("path", OTHER_CONFIGS + HELM_VALUES, ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_other_configs_in_the_repository_validate(path: Path) -> None:
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    config = document.get("config", {}) if path in HELM_VALUES else document
    assert isinstance(config, dict) and (config or path in HELM_VALUES)
    assert _errors(config) == []


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ({"backends": {"a": {"transport": "carrier-pigeon"}}}, "backends.a.transport"),
        ({"backends": {"Not_A_Label": {"transport": "builtin"}}}, "backends"),
        ({"listen": {"port": 70000}}, "listen.port"),
        ({"lisen": {"port": 1}}, ""),
        ({"logging": {"format": "xml"}}, "logging.format"),
        ({"telemetry": {"sample_ratio": 2}}, "telemetry.sample_ratio"),
    ],
)
def test_the_schema_refuses_what_the_model_refuses(document: dict[str, Any], where: str) -> None:
    errors = _errors(document)
    assert errors and any(e.startswith(f"{where}:") for e in errors), errors
    with pytest.raises(ConfigError):
        parse_config(yaml.safe_dump(document), "x.yaml", environ={})


def test_switchboard_schema_prints_and_writes_it(tmp_path: Path) -> None:
    out = tmp_path / "schema.json"
    runs = [
        subprocess.run(
            [sys.executable, "-m", "gateway", *argv], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60
        )
        for argv in (["schema"], ["schema", "--output", str(out)])
    ]
    assert [r.returncode for r in runs] == [0, 0], [r.stderr for r in runs]
    assert runs[1].stdout == ""
    assert runs[0].stdout == out.read_text(encoding="utf-8") == schema_text()
