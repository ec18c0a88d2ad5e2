"""The §14.4 channel context of a hook is put in each backend's own channel ids."""

from __future__ import annotations

from typing import Any

from gateway.federation import Namer, View
from gateway.mcpl.channels import ChannelRouter
from gateway.mcpl.state import BackendMcpl


class _Relay:
    """The two things ChannelRouter.params_for reads from the relay."""

    def __init__(self, backends: dict[str, BackendMcpl]) -> None:
        self.backends = backends

    def backend(self, name: str) -> BackendMcpl:
        return self.backends[name]


class _Session:
    def __init__(self, view: View) -> None:
        self.view = view


def test_hook_channel_context_uses_the_backends_own_ids() -> None:
    chat = BackendMcpl({})
    chat.register([{"id": "discord:#general"}, {"id": "discord:#random"}])
    other = BackendMcpl({})
    other.register([{"id": "telegram:1"}])
    view = View("*", ("chat", "other"), Namer("conditional", "__", ("chat", "other")))
    router = ChannelRouter(_Relay({"chat": chat, "other": other}))  # type: ignore[arg-type]
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
