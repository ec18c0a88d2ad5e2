"""The per-session codecs (adapters/codecs.py): what each dialect is sent, and how."""

from __future__ import annotations

from adapters import codecs


def test_only_a_modern_client_cannot_be_asked_mid_request() -> None:
    assert codecs.LEGACY.asks_mid_request and codecs.DRAFT.asks_mid_request
    assert not codecs.MODERN.asks_mid_request
    assert [c.resumable_streams for c in (codecs.LEGACY, codecs.DRAFT, codecs.MODERN)] == [True, True, False]
    assert [c.logs_by_default for c in (codecs.LEGACY, codecs.DRAFT, codecs.MODERN)] == [True, True, False]


def test_a_legacy_client_never_sees_the_modern_result_fields() -> None:
    result = {"content": [], "resultType": "complete", "ttlMs": 0, "cacheScope": "public"}
    assert codecs.LEGACY.result(result) == {"content": []}
    assert codecs.DRAFT.result(result) == {"content": []}
    assert codecs.MODERN.result(result) == result


def test_the_draft_gets_its_own_names_on_the_wire() -> None:
    changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    assert codecs.LEGACY.render(changed) is changed
    rendered = codecs.DRAFT.render(changed)
    assert rendered is not None and rendered["method"] == "tools/changed"
