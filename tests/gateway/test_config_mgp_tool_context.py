"""The ``mgp.tool_context`` (§16.8 context budget) and ``mgp.pinned_tools`` (§16.7 pins) config keys
(gateway/config_mgp.py): defaults equal to the budget the tool cache uses, every field documented,
precise issues for bad values, and the example config still passes ``switchboard check``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gateway.cli import main as cli_main
from gateway.config import Config, parse_config
from gateway.config_mgp import Mgp, MgpToolContext
from gateway.mgp.tool_session import ContextBudget
from tests.gateway.test_config import one_issue

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def test_defaults_are_the_budget_the_tool_cache_uses() -> None:
    mgp = Config().mgp
    assert ContextBudget(**mgp.tool_context.model_dump()) == ContextBudget(), "§16.8 example budget"
    assert mgp.pinned_tools == {}


def test_every_field_is_documented() -> None:
    for model in (MgpToolContext,):
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no description"
    assert Mgp.model_fields["tool_context"].description and Mgp.model_fields["pinned_tools"].description


def test_a_configured_budget_and_pins() -> None:
    config = parse_config(
        textwrap.dedent(
            """\
            mgp:
              tool_context: {max_tokens: 500, discovery_reserve: 100, cache_limit: 200}
              pinned_tools: {"*": [echo], alice: [add, echo]}
            """
        ),
        "cfg.yaml",
        environ={},
    )
    budget = ContextBudget(**config.mgp.tool_context.model_dump())
    assert budget == ContextBudget(max_tokens=500, pinned_reserve=2000, discovery_reserve=100, cache_limit=200)
    assert config.mgp.pinned_tools == {"*": ["echo"], "alice": ["add", "echo"]}


@pytest.mark.parametrize(
    ("text", "line", "path"),
    [
        ("mgp:\n  tool_context: {max_tokens: 0}\n", 2, "mgp.tool_context.max_tokens"),
        ("mgp:\n  tool_context: {cache_limit: -1}\n", 2, "mgp.tool_context.cache_limit"),
        ("mgp:\n  tool_context: {discovery_reserve: many}\n", 2, "mgp.tool_context.discovery_reserve"),
        ("mgp:\n  tool_context: {max_token: 10}\n", 2, "mgp.tool_context.max_token"),
        ("mgp:\n  pinned_tools: {alice: echo}\n", 2, "mgp.pinned_tools.alice"),
        ("mgp:\n  pinned_tools: {alice: ['']}\n", 2, "mgp.pinned_tools.alice.0"),
    ],
)
def test_field_constraints(text: str, line: int, path: str) -> None:
    issue = one_issue(text)
    assert (issue.line, issue.path) == (line, path)
    assert issue.reason


def test_the_mgp_example_passes_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["check", "-c", str(PROJECT_ROOT / "deploy/examples/mgp.yaml")]) == 0
    assert "ok" in capsys.readouterr().out
