"""gateway/config.py and ``python -m gateway check``: defaults, env expansion, every rule, precise issues."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli import main as cli_main
from gateway.config import (
    Backend,
    Config,
    ConfigError,
    ConfigIssue,
    default_config,
    expand_env,
    is_loopback,
    load_config,
    parse_config,
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def issues_of(text: str, environ: dict[str, str] | None = None) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as info:
        parse_config(textwrap.dedent(text), "cfg.yaml", environ={} if environ is None else environ)
    assert info.value.issues, "a ConfigError always carries at least one issue"
    return info.value.issues


def one_issue(text: str, environ: dict[str, str] | None = None) -> ConfigIssue:
    issues = issues_of(text, environ)
    assert len(issues) == 1, issues
    return issues[0]


def config_with(**backend: Any) -> dict[str, Any]:
    return {"backends": {"b": backend}}


# ---- defaults --------------------------------------------------------------------------------


def test_empty_file_is_all_defaults() -> None:
    for text in ("", "# only a comment\n", "{}"):
        config = parse_config(text)
        assert config == Config()
    config = Config()
    assert (config.listen.host, config.listen.port) == ("127.0.0.1", 8787)
    assert config.backends == {}
    assert config.federation.prefix == "conditional"
    assert config.federation.separator == "__"
    assert config.federation.page_size == 100
    assert config.federation.list_cache_s == 30.0
    assert config.limits.session_queue == 1024
    assert config.limits.sse_replay_events == 256
    assert config.log_level == "info"
    assert config.security.allowed_hosts is None
    assert config.loopback


def test_backend_defaults() -> None:
    backend = Backend(transport="stdio", command="x")
    assert backend.args == [] and backend.env == {} and backend.headers == {}
    assert backend.required is False
    assert backend.timeout_s == 300.0
    assert backend.restart.initial_backoff_s == 0.5
    assert backend.restart.max_backoff_s == 30.0


def test_embedded_default() -> None:
    config = default_config()
    assert list(config.backends) == ["demo"]
    demo = config.backends["demo"]
    assert demo.transport == "builtin" and demo.server == "demo" and demo.required
    assert config.loopback


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    assert Config.model_validate({"listen": {"host": host}}).loopback is loopback


def test_a_full_valid_file() -> None:
    config = parse_config(
        textwrap.dedent(
            """\
            listen: {host: 127.0.0.1, port: 0}
            log_level: debug
            backends:
              files:
                transport: stdio
                command: npx
                args: ["-y", "server"]
                env: {A: "1"}
              search:
                transport: http
                url: https://example.com/mcp
                headers: {Authorization: Bearer x}
                required: true
              legacy: {transport: sse, url: "http://127.0.0.1:9/sse"}
              sock: {transport: ws, url: "wss://h/ws"}
              demo: {transport: builtin}
            federation: {prefix: always, separator: "::", page_size: 5, list_cache_s: 0}
            limits: {sse_replay_events: 0}
            """
        )
    )
    assert list(config.backends) == ["files", "search", "legacy", "sock", "demo"]
    assert config.backends["files"].args == ["-y", "server"]
    assert config.backends["search"].headers == {"Authorization": "Bearer x"}
    assert config.federation.separator == "::"
    assert config.listen.port == 0


@pytest.mark.parametrize("path", sorted((PROJECT_ROOT / "deploy" / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_examples_are_valid(path: Path) -> None:
    assert isinstance(load_config(path, environ={}), Config)


# ---- environment expansion -------------------------------------------------------------------


def test_expand_env_forms() -> None:
    env = {"HOST": "h", "PORT": "9", "EMPTY": ""}
    assert expand_env("http://${HOST}:${PORT}/mcp", env) == "http://h:9/mcp"
    assert expand_env("${MISSING:-fallback}", env) == "fallback"
    assert expand_env("${MISSING:-}", env) == ""
    assert expand_env("${HOST:-fallback}", env) == "h"
    assert expand_env("${EMPTY}", env) == ""
    assert expand_env("$HOST and ${ HOST } stay", env) == "$HOST and ${ HOST } stay"
    assert expand_env("${MISSING:-a:b/c}", env) == "a:b/c"


def test_default_applies_to_an_empty_variable_too() -> None:
    # Shell and Compose semantics of ${X:-default}.
    assert expand_env("${EMPTY:-d}", {"EMPTY": ""}) == "d"


def test_expand_env_walks_containers_and_leaves_other_values() -> None:
    env = {"A": "x"}
    value = {"k": ["${A}", 1, True, None, {"n": "${A}${A}"}], "${A}": 2.5}
    assert expand_env(value, env) == {"k": ["x", 1, True, None, {"n": "xx"}], "${A}": 2.5}


def test_expand_env_unset_names_the_key_path() -> None:
    with pytest.raises(KeyError) as info:
        expand_env({"backends": {"x": {"args": ["a", "${NOPE}"]}}}, {})
    assert info.value.args[0] == "backends.x.args[1]: environment variable NOPE is not set"


def test_expand_env_uses_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_TEST_VAR", "from-os")
    assert expand_env("${SWITCHBOARD_TEST_VAR}") == "from-os"


def test_env_values_are_validated_after_expansion() -> None:
    config = parse_config(
        "listen:\n  port: ${PORT}\nbackends:\n  up:\n    transport: http\n    url: ${URL:-http://127.0.0.1:1/mcp}\n",
        environ={"PORT": "9001"},
    )
    assert config.listen.port == 9001
    assert config.backends["up"].url == "http://127.0.0.1:1/mcp"


def test_unset_env_is_an_issue_with_line_and_path() -> None:
    issue = one_issue(
        """\
        backends:
          x:
            transport: http
            url: http://h/mcp
            headers:
              Authorization: Bearer ${TOKEN}
        """
    )
    assert (issue.file, issue.line, issue.path) == ("cfg.yaml", 6, "backends.x.headers.Authorization")
    assert issue.reason == "environment variable TOKEN is not set"
    assert str(issue) == "cfg.yaml:6: backends.x.headers.Authorization: environment variable TOKEN is not set"


def test_unset_env_in_a_list_points_at_the_item() -> None:
    issue = one_issue(
        """\
        backends:
          x:
            transport: stdio
            command: run
            args:
              - ok
              - ${NOPE}
        """
    )
    assert (issue.line, issue.path) == (7, "backends.x.args[1]")


# ---- validation rules ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "demo", "a-b", "a1", "0", "x" * 63, "1-2-3"])
def test_valid_backend_names(name: str) -> None:
    assert name in Config.model_validate({"backends": {name: {"transport": "builtin"}}}).backends


@pytest.mark.parametrize("name", ["A", "Demo", "a_b", "-a", "a-", "x" * 64, "a.b", "a b", "é", "a+b", "demo\n", ""])
def test_invalid_backend_names(name: str) -> None:
    text = yaml.safe_dump({"backends": {name: {"transport": "builtin"}}})
    issue = one_issue(text)
    assert issue.path == f"backends.{name}"
    assert "must be a lowercase DNS label" in issue.reason
    assert repr(name) in issue.reason


def test_backend_name_issue_points_at_the_name_line() -> None:
    issues = issues_of(
        """\
        listen:
          port: 1
        backends:
          good:
            transport: builtin
          Bad_Name:
            transport: builtin
          UPPER:
            transport: builtin
        """
    )
    assert [(i.line, i.path) for i in issues] == [(6, "backends.Bad_Name"), (8, "backends.UPPER")]


def test_non_string_backend_name() -> None:
    issue = one_issue("backends:\n  123:\n    transport: builtin\n")
    assert (issue.line, issue.path) == (2, "backends.123")


def test_stdio_needs_command() -> None:
    issue = one_issue("backends:\n  x:\n    transport: stdio\n    args: [a]\n")
    assert (issue.line, issue.path, issue.reason) == (2, "backends.x", "transport 'stdio' needs 'command'")


@pytest.mark.parametrize("transport", ["http", "sse", "ws"])
def test_remote_transports_need_url(transport: str) -> None:
    issue = one_issue(f"backends:\n  x:\n    transport: {transport}\n")
    assert (issue.line, issue.path) == (2, "backends.x")
    assert issue.reason == f"transport '{transport}' needs 'url'"


@pytest.mark.parametrize(
    ("transport", "url", "ok"),
    [
        ("http", "http://h/mcp", True),
        ("http", "https://h/mcp", True),
        ("sse", "http://h/sse", True),
        ("sse", "https://h/sse", True),
        ("ws", "ws://h/ws", True),
        ("ws", "wss://h/ws", True),
        ("http", "ws://h/mcp", False),
        ("http", "ftp://h/mcp", False),
        ("http", "h/mcp", False),
        ("sse", "wss://h/sse", False),
        ("ws", "http://h/ws", False),
        ("ws", "https://h/ws", False),
    ],
)
def test_url_schemes(transport: str, url: str, ok: bool) -> None:
    text = f"backends:\n  x:\n    transport: {transport}\n    url: '{url}'\n"
    if ok:
        assert parse_config(text).backends["x"].url == url
        return
    issue = one_issue(text)
    assert (issue.line, issue.path) == (4, "backends.x.url")
    assert issue.reason.startswith(f"url for transport '{transport}' must start with ")


def test_unknown_transport() -> None:
    issue = one_issue("backends:\n  x:\n    transport: carrier-pigeon\n")
    assert (issue.line, issue.path) == (3, "backends.x.transport")
    assert "'stdio'" in issue.reason and "'builtin'" in issue.reason


def test_missing_transport() -> None:
    issue = one_issue("backends:\n  x:\n    command: run\n")
    # A missing key has no line of its own: the issue points at the mapping that lacks it.
    assert (issue.line, issue.path, issue.reason) == (2, "backends.x.transport", "Field required")


def test_builtin_server_must_be_known() -> None:
    issue = one_issue("backends:\n  x:\n    transport: builtin\n    server: other\n")
    assert (issue.line, issue.path) == (4, "backends.x.server")


@pytest.mark.parametrize(
    ("text", "line", "path"),
    [
        ("colour: blue\n", 1, "colour"),
        ("listen:\n  port: 1\n  prot: 3\n", 3, "listen.prot"),
        ("backends:\n  x:\n    transport: builtin\n    comand: y\n", 4, "backends.x.comand"),
        ("backends:\n  x:\n    transport: builtin\n    restart:\n      backoff: 1\n", 5, "backends.x.restart.backoff"),
        ("federation:\n  prefx: always\n", 2, "federation.prefx"),
        ("security:\n  hosts: []\n", 2, "security.hosts"),
        ("limits:\n  max_body: 1\n", 2, "limits.max_body"),
    ],
)
def test_unknown_keys(text: str, line: int, path: str) -> None:
    issue = one_issue(text)
    assert (issue.line, issue.path, issue.reason) == (line, path, "unknown key")


@pytest.mark.parametrize("separator", ["__", "::", "-", "+", ".", "--", "X", "__|__"])
def test_valid_separators(separator: str) -> None:
    assert Config.model_validate({"federation": {"separator": separator}}).federation.separator == separator


@pytest.mark.parametrize("separator", ["a", "_a_", "1", "x9"])
def test_separator_must_not_contain_lowercase_or_digits(separator: str) -> None:
    issue = one_issue(f"federation:\n  separator: '{separator}'\n")
    assert (issue.line, issue.path) == (2, "federation.separator")
    assert "must not contain lowercase letters or digits" in issue.reason


@pytest.mark.parametrize("separator", ["", "_________"])
def test_separator_length(separator: str) -> None:
    issue = one_issue(f"federation:\n  separator: '{separator}'\n")
    assert (issue.line, issue.path) == (2, "federation.separator")


def test_backend_name_must_not_contain_the_separator() -> None:
    issue = one_issue(
        """\
        federation:
          separator: '-'
        backends:
          ok:
            transport: builtin
          a-b:
            transport: builtin
        """
    )
    assert (issue.line, issue.path) == (6, "backends.a-b")
    assert issue.reason == "backend name 'a-b' contains the federation separator '-'"


@pytest.mark.parametrize(
    ("text", "line", "path"),
    [
        ("listen:\n  port: 65536\n", 2, "listen.port"),
        ("listen:\n  port: -1\n", 2, "listen.port"),
        ("listen:\n  port: http\n", 2, "listen.port"),
        ("federation:\n  prefix: sometimes\n", 2, "federation.prefix"),
        ("federation:\n  page_size: 0\n", 2, "federation.page_size"),
        ("federation:\n  list_cache_s: -1\n", 2, "federation.list_cache_s"),
        ("limits:\n  max_body_bytes: 10\n", 2, "limits.max_body_bytes"),
        ("limits:\n  session_queue: 7\n", 2, "limits.session_queue"),
        ("limits:\n  sse_replay_events: -1\n", 2, "limits.sse_replay_events"),
        ("log_level: verbose\n", 1, "log_level"),
        ("backends:\n  x:\n    transport: stdio\n    command: c\n    timeout_s: 0\n", 5, "backends.x.timeout_s"),
        ("backends:\n  x:\n    transport: stdio\n    command: c\n    args: a b\n", 5, "backends.x.args"),
        ("backends:\n  x:\n    transport: stdio\n    command: c\n    args: [a, [b]]\n", 5, "backends.x.args.1"),
        ("backends: []\n", 1, "backends"),
        ("backends:\n  x: just-a-string\n", 2, "backends.x"),
    ],
)
def test_field_constraints(text: str, line: int, path: str) -> None:
    issue = one_issue(text)
    assert (issue.line, issue.path) == (line, path)
    assert issue.reason


def test_several_issues_are_all_reported_in_order() -> None:
    issues = issues_of(
        """\
        listen:
          port: 70000
        backends:
          a:
            transport: stdio
          b:
            transport: http
            url: ws://nope
        log_level: loud
        """
    )
    assert [(i.line, i.path) for i in issues] == [
        (2, "listen.port"),
        (4, "backends.a"),
        (8, "backends.b.url"),
        (9, "log_level"),
    ]


def test_invalid_yaml_is_one_line_with_the_line_number() -> None:
    issue = one_issue("listen:\n  port: 1\nbackends: [\n")
    assert issue.path == ""
    assert issue.line == 4
    assert issue.reason.startswith("not valid YAML: ")
    assert "\n" not in str(issue)


def test_top_level_must_be_a_mapping() -> None:
    issue = one_issue("- a\n- b\n")
    assert (issue.line, issue.path, issue.reason) == (1, "", "the top level must be a mapping")
    assert str(issue) == "cfg.yaml:1: <root>: the top level must be a mapping"


def test_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(missing)
    (issue,) = info.value.issues
    assert (issue.file, issue.line, issue.path) == (str(missing), None, "")
    assert issue.reason.startswith("cannot read")
    assert str(issue).startswith(f"{missing}: <root>: cannot read")


def test_load_config_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("listen:\n  bogus: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}:2: listen.bogus: unknown key"


# ---- the check command -----------------------------------------------------------------------

ISSUE_LINE = re.compile(r"^error: (?P<file>.+?):(?P<line>\d+): (?P<path>\S+): (?P<reason>.+)$")


def run_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "check", "-c", str(path)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_check_command_accepts_a_good_file(tmp_path: Path) -> None:
    path = tmp_path / "good.yaml"
    path.write_text("backends:\n  a:\n    transport: builtin\n  b:\n    transport: stdio\n    command: run\n")
    done = run_check(path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert f"{path}: ok (2 backend(s), prefix mode conditional)" in done.stdout


def test_check_command_explains_a_bad_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "listen:\n  port: 99999\nbackends:\n  Bad:\n    transport: builtin\n  ok:\n    transport: http\n"
        "    url: ftp://x\nextra: 1\n"
    )
    done = run_check(path)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    parsed = [ISSUE_LINE.match(line) for line in lines[:-1]]
    assert all(parsed), lines
    found = {(m["file"], int(m["line"]), m["path"]) for m in parsed if m}
    assert found == {
        (str(path), 2, "listen.port"),
        (str(path), 4, "backends.Bad"),
        (str(path), 8, "backends.ok.url"),
        (str(path), 9, "extra"),
    }
    assert lines[-1] == f"4 error(s) in {path}"


def test_check_command_on_a_missing_file(tmp_path: Path) -> None:
    done = run_check(tmp_path / "missing.yaml")
    assert done.returncode == 1
    assert "cannot read" in done.stderr


def test_check_in_process_reports_static_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "open.yaml"
    path.write_text("listen: {host: 0.0.0.0}\n")
    assert cli_main(["check", "-c", str(path)]) == 1
    assert "not a loopback address" in capsys.readouterr().err
    path.write_text("listen: {host: 0.0.0.0}\nauth: {anonymous: {capabilities: [mcp/request:tools/list]}}\n")
    assert cli_main(["check", "-c", str(path)]) == 0
    assert "ok (0 backend(s)" in capsys.readouterr().out


def test_check_in_process_env_issue(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "env.yaml"
    path.write_text("backends:\n  x:\n    transport: stdio\n    command: ${SWITCHBOARD_SURELY_UNSET_VAR}\n")
    assert cli_main(["check", "-c", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"error: {path}:4: backends.x.command: environment variable SWITCHBOARD_SURELY_UNSET_VAR is not set" in err


def test_check_warns_about_fields_the_transport_ignores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text(
        "backends:\n"
        "  a: {transport: stdio, command: x, url: 'http://127.0.0.1:1/mcp'}\n"
        "  b: {transport: http, url: 'http://127.0.0.1:1/mcp', args: [y]}\n"
        "  c: {transport: http, url: 'http://127.0.0.1:1/mcp', headers: {k: v}}\n"
    )
    assert cli_main(["check", "-c", str(path)]) == 0, "warnings do not fail the check"
    err = capsys.readouterr().err
    assert "warning: " in err
    assert "backends.a.url is ignored for transport 'stdio'" in err
    assert "backends.b.args is ignored for transport 'http'" in err
    assert "backends.c" not in err


def test_mcpl_section_names_real_backends() -> None:
    from gateway.config import Config

    good = Config.model_validate(
        {
            "backends": {"mem": {"transport": "builtin"}},
            "mcpl": {"hook_order": ["mem"], "routing": {"mem": {"memory.*": {"model": "small"}}}},
            "principals": {"alice": {"mcpl": {"feature_sets": {"deny": ["memory.proactive"]}}}},
        }
    )
    assert good.mcpl.feature_sets.allow == ["*"], "by default a host may enable anything"
    assert good.principals["alice"].mcpl.feature_sets is not None
    assert good.principals["alice"].mcpl.feature_sets.allow == ["*"]
    with pytest.raises(ValueError, match=r"mcpl\.hook_order: no backend named ghost"):
        Config.model_validate({"backends": {"mem": {"transport": "builtin"}}, "mcpl": {"hook_order": ["ghost"]}})
    with pytest.raises(ValueError, match=r"mcpl\.after_inference_failure"):
        Config.model_validate({"mcpl": {"after_inference_failure": "maybe"}})


# ---- mgp ---------------------------------------------------------------------------------------


def test_mgp_defaults() -> None:
    mgp = Config().mgp
    assert mgp.permission_policy == "config_only"
    assert mgp.approved_permissions == [] and mgp.access == [] and mgp.tools == {} and mgp.trust == {}
    assert mgp.grant_ttl_s == 86400
    assert mgp.default_access == "opt-out"


def test_mgp_every_field_is_documented() -> None:
    from gateway.config_mgp import Mgp, MgpAccessEntry, MgpCodeSafety, MgpToolSecurity

    for model in (Mgp, MgpAccessEntry, MgpCodeSafety, MgpToolSecurity):
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no description"
    assert Config.model_fields["mgp"].description


def test_a_full_mgp_section() -> None:
    config = parse_config(
        textwrap.dedent(
            """\
            backends:
              term: {transport: stdio, command: term-server}
              files: {transport: builtin}
            mgp:
              permission_policy: interactive
              approved_permissions: [filesystem.read, 'memory.*']
              grant_ttl_s: 3600
              default_access: opt-in
              access:
                - {agent_id: alice, server_id: files, permission: allow}
                - {agent_id: alice, server_id: term, tool_name: run, permission: deny}
              tools:
                term:
                  run:
                    risk_level: dangerous
                    validator: sandbox
                    permissions_required: [shell.execute]
                    side_effects: [process, filesystem]
                    reversible: false
                    confirmation_required: true
                  eval:
                    validator: code_safety
                    code_safety: {level: strict, max_code_size_bytes: 10000, allowed_imports: [json]}
              trust:
                term: experimental
                files: core
            """
        ),
        "cfg.yaml",
        environ={},
    )
    mgp = config.mgp
    assert mgp.permission_policy == "interactive" and mgp.default_access == "opt-in" and mgp.grant_ttl_s == 3600
    assert mgp.approved_permissions == ["filesystem.read", "memory.*"]
    assert [(e.agent_id, e.server_id, e.tool_name, e.permission) for e in mgp.access] == [
        ("alice", "files", None, "allow"),
        ("alice", "term", "run", "deny"),
    ]
    run = mgp.tools["term"]["run"]
    assert (run.risk_level, run.validator, run.permissions_required) == ("dangerous", "sandbox", ["shell.execute"])
    assert run.side_effects == ["process", "filesystem"] and run.reversible is False and run.confirmation_required
    safety = mgp.tools["term"]["eval"].code_safety
    assert safety is not None and (safety.level, safety.language, safety.max_code_size_bytes) == (
        "strict",
        "python",
        10000,
    )
    assert mgp.tools["term"]["eval"].risk_level is None, "unset: derived by the §4.6 rule"
    assert mgp.trust == {"term": "experimental", "files": "core"}


@pytest.mark.parametrize(
    ("text", "line", "path"),
    [
        ("mgp:\n  permission_policy: yolo\n", 2, "mgp.permission_policy"),
        ("mgp:\n  default_access: closed\n", 2, "mgp.default_access"),
        ("mgp:\n  grant_ttl_s: 0\n", 2, "mgp.grant_ttl_s"),
        ("mgp:\n  approved_permissions: ['']\n", 2, "mgp.approved_permissions.0"),
        ("mgp:\n  approved_permissions: [' shell']\n", 2, "mgp.approved_permissions.0"),
        ("mgp:\n  access:\n    - {agent_id: a, permission: allow}\n", 3, "mgp.access.0.server_id"),
        ("mgp:\n  access:\n    - {agent_id: a, server_id: s, permission: maybe}\n", 3, "mgp.access.0.permission"),
        ("mgp:\n  access:\n    - {agent_id: '', server_id: s, permission: allow}\n", 3, "mgp.access.0.agent_id"),
        ("mgp:\n  access:\n    - {agent_id: a, server_id: s, permission: allow, tool: x}\n", 3, "mgp.access.0.tool"),
        ("mgp:\n  tools:\n    s:\n      t: {risk_level: extreme}\n", 4, "mgp.tools.s.t.risk_level"),
        ("mgp:\n  tools:\n    s:\n      t: {validator: magic}\n", 4, "mgp.tools.s.t.validator"),
        ("mgp:\n  tools:\n    s:\n      t: {side_effects: [time]}\n", 4, "mgp.tools.s.t.side_effects.0"),
        ("mgp:\n  tools:\n    s:\n      t: {code_safety: {level: lax}}\n", 4, "mgp.tools.s.t.code_safety.level"),
        ("mgp:\n  tools:\n    s:\n      t: {danger: true}\n", 4, "mgp.tools.s.t.danger"),
        ("mgp:\n  trust:\n    s: trusted\n", 3, "mgp.trust.s"),
        ("mgp:\n  yolo: true\n", 2, "mgp.yolo"),
    ],
)
def test_mgp_field_constraints(text: str, line: int, path: str) -> None:
    issue = one_issue(text)
    assert (issue.line, issue.path) == (line, path)
    assert issue.reason


@pytest.mark.parametrize(
    ("section", "line", "path"),
    [
        ("  tools:\n    files: {}\n    ghost:\n      run: {validator: sandbox}\n", 8, "mgp.tools.ghost"),
        ("  trust:\n    ghost: core\n", 7, "mgp.trust.ghost"),
        ("  access:\n    - {agent_id: a, server_id: ghost, permission: deny}\n", 7, "mgp.access.0.server_id"),
    ],
)
def test_mgp_names_real_backends(section: str, line: int, path: str) -> None:
    issue = one_issue("backends:\n  files:\n    transport: builtin\n  term: {transport: builtin}\nmgp:\n" + section)
    assert (issue.line, issue.path) == (line, path)
    assert issue.reason == "no backend named 'ghost' (backends: files, term)"


def test_mgp_unknown_backends_are_named_together() -> None:
    issue = one_issue("mgp:\n  trust:\n    a: core\n    b: core\n  tools:\n    a: {}\n")
    assert (issue.line, issue.path) == (6, "mgp.tools.a")
    assert issue.reason == "no backend named 'a', 'b' (backends: none configured)"


def test_check_command_explains_a_bad_mgp_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mgp.yaml"
    path.write_text(
        "backends:\n  files: {transport: builtin}\n"
        "mgp:\n  permission_policy: yolo\n  tools:\n    fils:\n"
        "      write: {permissions_required: [filesystem.write]}\n"
    )
    assert cli_main(["check", "-c", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == (
        f"error: {path}:4: mgp.permission_policy: "
        "Input should be 'interactive', 'auto_approve', 'deny_all' or 'config_only'"
    )
    assert err[-1] == f"1 error(s) in {path}", "the cross-reference is checked once the fields are valid"
    path.write_text(path.read_text().replace("yolo", "auto_approve"))
    assert cli_main(["check", "-c", str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {path}:6: mgp.tools.fils: no backend named 'fils' (backends: files)",
        f"1 error(s) in {path}",
    ]
    path.write_text(path.read_text().replace("fils", "files"))
    assert cli_main(["check", "-c", str(path)]) == 0
    assert "ok (1 backend(s)" in capsys.readouterr().out


def test_mgp_contradicting_access_entries() -> None:
    text = (
        "backends:\n  s: {transport: builtin}\nmgp:\n  access:\n"
        "    - {agent_id: a, server_id: s, permission: allow}\n"
        "    - {agent_id: a, server_id: s, tool_name: t, permission: deny}\n"
        "    - {agent_id: a, server_id: s, permission: allow}\n"
        "    - {agent_id: a, server_id: s, permission: deny}\n"
    )
    issue = one_issue(text)
    assert (issue.line, issue.path) == (8, "mgp.access.3")
    assert issue.reason == "contradicts mgp.access.0 (same agent_id, server_id and tool_name)"
    assert parse_config(text.rsplit("    - ", 1)[0], "cfg.yaml", environ={}).mgp.access[2].permission == "allow"
