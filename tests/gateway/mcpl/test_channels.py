"""The §14.4 channel context of a hook is put in each backend's own channel ids."""

from __future__ import annotations

from typing import Any

from gateway.audit import AuditLog
from gateway.config import AuditConfig, Mcpl
from gateway.federation import Namer, View
from gateway.mcpl.channels import ChannelRouter
from gateway.mcpl.directory import McplDirectory
from gateway.mcpl.plumbing import McplAudit, Peers
from gateway.mcpl.state import BackendMcpl, RelayState
from gateway.metrics import Metrics
from policies.auth import PrincipalRegistry
from policies.chain import PolicyChain


def _router(backends: dict[str, BackendMcpl]) -> ChannelRouter:
    """A router over ``backends`` with real, empty collaborators (no sessions, connections or policies)."""
    state = RelayState(Mcpl(), backends=backends)
    metrics = Metrics()

    async def no_tag_check(*_: Any) -> Any:
        raise AssertionError("params_for checks no tags")

    return ChannelRouter(
        state,
        McplDirectory(state, [], PrincipalRegistry({})),
        Peers(state, {}),
        PolicyChain([]),
        McplAudit(AuditLog(AuditConfig(), metrics), metrics),
        no_tag_check,
    )


class _Session:
    def __init__(self, view: View) -> None:
        self.view = view


def test_hook_channel_context_uses_the_backends_own_ids() -> None:
    chat = BackendMcpl({})
    chat.register([{"id": "discord:#general"}, {"id": "discord:#random"}])
    other = BackendMcpl({})
    other.register([{"id": "telegram:1"}])
    view = View("*", ("chat", "other"), Namer("conditional", "__", ("chat", "other")))
    router = _router({"chat": chat, "other": other})
    params: dict[str, Any] = {
        "inferenceId": "i",
        "channels": {
            "incoming": {"channelId": "chat.discord:#general", "messageId": "m", "threadId": "t"},
            "defaultOutgoing": {"channelId": "chat.discord:#general"},
            "candidates": ["ui", "chat.discord:#general", "other.telegram:1"],
        },
    }
    for_chat = router.params_for(_Session(view), "chat", params)  # type: ignore[arg-type]
    assert for_chat["channels"] == {
        "incoming": {"channelId": "discord:#general", "messageId": "m", "threadId": "t"},
        "defaultOutgoing": {"channelId": "discord:#general"},
        "candidates": ["ui", "discord:#general", "other.telegram:1"],
    }
    for_other = router.params_for(_Session(view), "other", params)  # type: ignore[arg-type]
    assert for_other["channels"]["candidates"] == ["ui", "chat.discord:#general", "telegram:1"]
    assert params["channels"]["incoming"]["channelId"] == "chat.discord:#general", "the host's params are not changed"
    assert router.params_for(_Session(view), "chat", {"inferenceId": "i"}) == {"inferenceId": "i"}
