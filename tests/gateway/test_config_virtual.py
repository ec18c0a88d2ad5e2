"""gateway/config_virtual.py through parse_config: every rule, each error located at its key and line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gateway.app import front_doors
from gateway.cli import main as cli_main
from gateway.config import ConfigError, ConfigIssue, parse_config

BACKENDS = """\
backends:
  weather: {transport: builtin}
  files: {transport: builtin}
"""


def issues(text: str) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as info:
        parse_config(BACKENDS + textwrap.dedent(text), "cfg.yaml", environ={})
    return info.value.issues


def one(text: str) -> ConfigIssue:
    found = issues(text)
    assert len(found) == 1, found
    return found[0]


def test_a_full_virtual_server_parses() -> None:
    config = parse_config(
        BACKENDS
        + textwrap.dedent(
            """\
            virtual_servers:
              ops:
                tools: ["weather:get_*", "files:read_file"]
                prompts: ["weather:*"]
                resources: ["files:file:///srv/*"]
                rename: {forecast: "weather:get_forecast"}
                descriptions: {forecast: "Tomorrow's weather", read_file: "Read one file"}
                principals: [alice]
                server_info: {name: ops-tools, version: "2.1", title: Ops}
                instructions: Use forecast first.
            mcpx:
              topics:
                room: {participants: [ops, weather]}
            """
        ),
        "cfg.yaml",
        environ={},
    )
    ops = config.virtual_servers["ops"]
    assert ops.tools == ["weather:get_*", "files:read_file"]
    assert ops.resources == ["files:file:///srv/*"]  # the URI keeps its own ':'
    assert ops.server_info is not None and ops.server_info.title == "Ops"
    assert config.mcpx.topics["room"].participants == ["ops", "weather"]


def test_the_default_is_no_virtual_server() -> None:
    assert parse_config(BACKENDS, "cfg.yaml", environ={}).virtual_servers == {}


def test_a_name_of_a_backend_is_refused_at_its_key() -> None:
    issue = one(
        """\
        virtual_servers:
          weather: {tools: ["files:*"]}
        """
    )
    assert issue.path == "virtual_servers.weather"
    assert issue.line == 5
    assert "backend's name" in issue.reason and "/servers/weather/mcp" in issue.reason


@pytest.mark.parametrize("name", ["Ops", "ops_1", "-ops", "a" * 64, "ops\n"])
def test_a_name_must_be_a_dns_label(name: str) -> None:
    found = issues(f"virtual_servers:\n  {name!r}: {{tools: ['files:*']}}\n")
    assert any("virtual server name" in i.reason and "DNS label" in i.reason for i in found), found


@pytest.mark.parametrize("entry", ["weather", ":get", "weather:", "Weather:get", "wea_ther:x"])
def test_an_entry_must_be_backend_colon_pattern(entry: str) -> None:
    issue = one(f"virtual_servers:\n  ops: {{tools: [{entry!r}]}}\n")
    assert issue.path == "virtual_servers.ops.tools.0"
    assert "BACKEND:PATTERN" in issue.reason


def test_an_entry_naming_an_unknown_backend_is_located() -> None:
    issue = one(
        """\
        virtual_servers:
          ops:
            tools: ["weather:*"]
            resources: ["files:*", "nowhere:file:///x"]
        """
    )
    assert issue.path == "virtual_servers.ops.resources.1"
    assert issue.line == 7
    assert "no backend named 'nowhere'" in issue.reason and "files, weather" in issue.reason


def test_a_rename_target_must_be_selected() -> None:
    issue = one(
        """\
        virtual_servers:
          ops:
            tools: ["weather:get_*"]
            rename: {wipe: "files:delete_all"}
        """
    )
    assert issue.path == "virtual_servers.ops.rename.wipe"
    assert "not selected" in issue.reason


def test_a_rename_target_is_one_literal_name() -> None:
    issue = one(
        """\
        virtual_servers:
          ops:
            tools: ["weather:*"]
            rename: {all: "weather:get_*"}
        """
    )
    assert issue.path == "virtual_servers.ops.rename"
    assert "no '*'" in issue.reason


def test_two_renames_of_one_item_are_refused() -> None:
    issue = one(
        """\
        virtual_servers:
          ops:
            tools: ["weather:*"]
            rename: {a: "weather:get", b: "weather:get"}
        """
    )
    assert "both rename weather:get" in issue.reason


def test_a_clash_between_two_literal_entries_is_a_config_error() -> None:
    issue = one(
        """\
        virtual_servers:
          ops:
            tools: ["weather:echo", "files:echo"]
        """
    )
    assert issue.path == "virtual_servers.ops.tools"
    assert "'echo'" in issue.reason and "files:echo, weather:echo" in issue.reason


def test_a_rename_onto_another_items_name_is_a_config_error() -> None:
    issue = one(
        """\
        virtual_servers:
          ops:
            tools: ["weather:echo", "files:cat"]
            rename: {echo: "files:cat"}
        """
    )
    assert "'echo'" in issue.reason and "files:cat" in issue.reason


def test_a_rename_resolves_a_clash() -> None:
    config = parse_config(
        BACKENDS + "virtual_servers:\n  ops:\n    tools: ['weather:echo', 'files:echo']\n"
        "    rename: {file_echo: 'files:echo'}\n",
        "cfg.yaml",
        environ={},
    )
    assert config.virtual_servers["ops"].rename == {"file_echo": "files:echo"}


def test_tools_and_prompts_clash_separately() -> None:
    config = parse_config(
        BACKENDS + "virtual_servers:\n  ops: {tools: ['weather:greet'], prompts: ['files:greet']}\n",
        "cfg.yaml",
        environ={},
    )
    assert config.virtual_servers["ops"].prompts == ["files:greet"]


def test_a_description_must_name_an_exposed_name() -> None:
    issue = one(
        """\
        virtual_servers:
          ops:
            tools: ["weather:get_*"]
            rename: {forecast: "weather:get_forecast"}
            descriptions: {get_forecast: "renamed away: not shown under this name"}
        """
    )
    assert issue.path == "virtual_servers.ops.descriptions.get_forecast"
    assert "not a name this server exposes" in issue.reason


def test_an_unknown_key_is_refused() -> None:
    issue = one("virtual_servers:\n  ops: {tools: ['files:*'], tool: ['x:y']}\n")
    assert issue.path == "virtual_servers.ops.tool" and issue.reason == "unknown key"


def test_a_topic_participant_must_be_a_backend_or_a_virtual_server() -> None:
    issue = one("mcpx:\n  topics:\n    room: {participants: [nobody]}\n")
    assert "no backend or virtual server named nobody" in issue.reason


def test_server_info_needs_a_name() -> None:
    issue = one("virtual_servers:\n  ops: {tools: ['files:*'], server_info: {version: '1'}}\n")
    assert issue.path == "virtual_servers.ops.server_info.name"


def test_check_counts_virtual_servers_and_run_prints_their_doors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(BACKENDS + "virtual_servers:\n  ops: {tools: ['files:*']}\n")
    assert cli_main(["check", "-c", str(path)]) == 0
    assert "ok (2 backend(s), 1 virtual server(s), prefix mode conditional)" in capsys.readouterr().out
    doors = front_doors("http://127.0.0.1:8787", parse_config(path.read_text(), environ={}))
    assert "virtual ops          http://127.0.0.1:8787/servers/ops/mcp  (also /sse, /mcp/ws)" in doors


def test_check_explains_a_virtual_server_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cfg.yaml"
    path.write_text(BACKENDS + "virtual_servers:\n  files: {tools: ['weather:*']}\n")
    assert cli_main(["check", "-c", str(path)]) == 1
    captured = capsys.readouterr()
    assert (
        f"{path}:5: virtual_servers.files: virtual server 'files' has a backend's name" in captured.out + captured.err
    )
