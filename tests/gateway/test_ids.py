"""gateway/ids.py: pooled random ids behave like secrets.token_urlsafe."""

from __future__ import annotations

import base64
import os
import re

import pytest

from gateway import ids


@pytest.mark.parametrize("nbytes", [1, 12, 24, 32, 5000])
def test_a_token_is_nbytes_of_base64url_without_padding(nbytes: int) -> None:
    token = ids.token_urlsafe(nbytes)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", token)
    assert len(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))) == nbytes


def test_tokens_do_not_repeat_across_refills() -> None:
    tokens = [ids.token_urlsafe(24) for _ in range(2_000)]  # about twelve 4 KiB refills
    assert len(set(tokens)) == len(tokens)


def test_a_forked_child_does_not_hand_out_the_parents_bytes() -> None:
    ids.token_urlsafe(12)  # the parent's buffer holds bytes not handed out yet
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next token and leave at once
        os.write(write, ids.token_urlsafe(12).encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert child != ids.token_urlsafe(12)
