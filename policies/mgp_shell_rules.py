"""MGP's ``sandbox`` and ``readonly`` validators (MGP 0.3 §4.5), which read arguments as shell
command lines; the entry is :func:`policies.mgp_validators.validate`, whose docstring states the
invariants.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from policies.mgp_validator_core import _OPEN_WRITE, Rejection, _Findings, _key_words, _Leaf, _quote, _strings

# ---- shell reading, shared by sandbox and readonly ---------------------------------------------

_QUOTES = str.maketrans("", "", "'\"\\")
# Words after which the next word is again a command.
_WRAPPERS = frozenset(
    "sudo doas pkexec su env nohup nice ionice time timeout xargs exec command builtin eval busybox stdbuf "
    "watch strace ltrace chroot setsid unbuffer runuser chrt taskset flock caffeinate then do else".split()
)
_SHELLS = frozenset("sh bash zsh dash ksh mksh ash fish csh tcsh busybox".split())


def _deobfuscate(text: str) -> str:
    """NFKC, lower case, quotes and backslashes removed (``r''m``, ``r\\m``, ``"rm"`` are ``rm``)."""
    return unicodedata.normalize("NFKC", text).lower().translate(_QUOTES)


def _basename(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _commands(text: str) -> Iterator[tuple[str, list[str]]]:
    """(command, its arguments) at every command position of a command line: the first word of
    each segment between separators, and the word after a wrapper (``sudo``, ``env X=1``,
    ``timeout 5``, ``sh -c``, ``find -exec``). Flags and assignments before a command are skipped."""
    for segment in _SEGMENTS.split(_deobfuscate(text)):
        words = segment.split()
        expect = True
        after_wrapper = False
        for index, raw in enumerate(words):
            word = raw if any(c in raw for c in "*?[") else _basename(raw)  # keep a globbed path whole
            if expect:
                if raw.startswith("-") or "=" in raw or (after_wrapper and _DURATION.fullmatch(raw)):
                    continue
                yield word, words[index + 1 :]
                after_wrapper = expect = word in _WRAPPERS or word in _SHELLS
            elif word in ("-exec", "-execdir", "-ok", "-okdir"):
                after_wrapper = expect = True


_SEGMENTS = re.compile(r"[;|&\n\r`(){}]+|\$\(|\b(?:then|do|else)\b")
_DURATION = re.compile(r"[\d.]+[smhd]?")


def _short_flags(args: Sequence[str]) -> str:
    return "".join(a[1:] for a in args if a.startswith("-") and not a.startswith("--"))


# ---- sandbox -----------------------------------------------------------------------------------

_SANDBOX_METACHARACTERS: tuple[tuple[str, str], ...] = (
    ("$(", "command substitution"),
    ("`", "command substitution"),
    ("${", "variable expansion"),
    ("<(", "process substitution"),
    (">(", "process substitution"),
    ("||", "command chaining"),
    ("&&", "command chaining"),
    ("|", "pipe"),
    (";", "command separator"),
    ("&", "background or redirection operator"),
    (">", "output redirection"),
    ("<", "input redirection"),
)
_LINE_BREAKS = re.compile("[\n\r\x00\x0b\x0c\x85\u2028\u2029]")
_VARIABLE = re.compile(r"\$[A-Za-z_'\"\[]")
_BRACE_EXPANSION = re.compile(r"\{[^{}\s]*,[^{}]*\}")
# name(){ ... name|name ... }: the definition is found by a bounded, non-backtracking pattern and the
# body is then searched for the recursive pipe (linear; a backreference scan would be quadratic).
_FUNCTION_DEFINITION = re.compile(r"(?<![\w:.])([\w:.]{1,64}+)\s*+\(\s*+\)\s*+\{([^}]{0,512}+)")


def _is_fork_bomb(text: str) -> bool:
    for match in _FUNCTION_DEFINITION.finditer(text):
        name = re.escape(match.group(1))
        if re.search(rf"(?<![\w:.]){name}\s*\|\s*{name}(?![\w:.])", match.group(2)):
            return True
    return False


_SANDBOX_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), why)
    for p, why in (
        (r"\brm\s+(-[a-z]*\s+)*-[a-z]*[rf][a-z]*\s+(-[a-z]*\s+)*/(\s|\*|$)", "recursive delete of /"),
        (r"--no-preserve-root", "recursive delete of /"),
        (r"\bmkfs(\.\w+)?\b", "filesystem formatting (mkfs)"),
        (r"\bformat(\.com)?\s+[a-z]:", "disk formatting (format X:)"),
        (r"\b(of|if)=/dev/(?!null\b|zero\b|u?random\b|stdin\b|stdout\b|stderr\b)", "raw device access (dd)"),
        (r">\s*/dev/(?!null\b|stdout\b|stderr\b|tty\b)", "write to a device"),
        (
            r"/dev/(sd[a-z]|hd[a-z]|nvme\d|vd[a-z]|xvd[a-z]|mmcblk\d|disk\d|disk/|rdisk\d|mem\b|kmem\b|port\b|mapper/|dm-\d|md\d|sg\d)",
            "raw device access",
        ),
        (r"/dev/(tcp|udp)/", "network redirection (/dev/tcp)"),
        (r"\bfork\s+while\s+fork\b", "fork bomb"),
        (r"\b(shred|wipefs|srm)\b\s+-", "destructive wipe"),
        (r"\bchmod\s+(-[a-z]+\s+)*0?[0-7]*777\s+/(\s|$)", "world-writable root"),
    )
)
# Commands refused at a command position, whatever their arguments.
_SANDBOX_COMMANDS: dict[str, str] = {
    **dict.fromkeys(("sudo", "su", "doas", "pkexec", "runuser"), "privilege escalation"),
    **dict.fromkeys(("shutdown", "reboot", "halt", "poweroff", "telinit"), "power off or reboot"),
    **dict.fromkeys(("mkfs", "fdisk", "sfdisk", "cfdisk", "parted", "wipefs", "shred", "mke2fs"), "disk destruction"),
    **dict.fromkeys(("nc", "ncat", "netcat", "socat", "telnet"), "raw network tool"),
    "crontab": "persistent job (crontab)",
    "killall5": "kill every process",
    "insmod": "kernel module load",
    "rmmod": "kernel module removal",
    "modprobe": "kernel module load",
}


_WINDOWS_DANGER: dict[str, str] = {
    **dict.fromkeys(("diskpart", "format-volume", "clear-disk", "cipher"), "disk destruction"),
    **dict.fromkeys(("stop-computer", "restart-computer"), "power off or reboot"),
    **dict.fromkeys(("bcdedit", "vssadmin", "wbadmin"), "boot or backup tampering"),
}


def _sandbox_command(command: str, args: Sequence[str]) -> str | None:
    if any(c in command.rstrip("?") for c in "*?["):  # "/???/r?" is /bin/rm; "what?" is a question
        return "wildcard in a command name"
    if command.startswith(("mkfs.", "mke2fs.")):
        return "disk destruction"
    if command == "dd":
        return "raw disk copy (dd)" if any(a.startswith(("if=", "of=")) for a in args) else None
    if command in _SANDBOX_COMMANDS:
        return _SANDBOX_COMMANDS[command]
    if command == "init" and args and args[0] in ("0", "6"):
        return "power off or reboot"
    if command == "systemctl" and any(a in ("poweroff", "reboot", "halt", "kexec", "rescue") for a in args):
        return "power off or reboot"
    if command == "rm":
        flags = _short_flags(args)
        if "r" in flags or any(a in ("--recursive", "--no-preserve-root") for a in args):
            return "recursive delete (rm -r)"
    if command in ("del", "erase", "rd", "rmdir") and "/s" in args:
        return "recursive delete (/s)"
    if command in ("remove-item", "ri") and any(a.startswith("-rec") for a in args):
        return "recursive delete (Remove-Item -Recurse)"
    if command in _WINDOWS_DANGER:
        return _WINDOWS_DANGER[command]
    if command == "find" and any(a in ("-delete", "-exec", "-execdir") for a in args):
        return "find with -delete or -exec"
    if command == "kill" and any(a in ("-1", "1") for a in args):
        return "kill every process"
    if command in ("chmod", "chown", "chgrp") and "r" in _short_flags(args) and "/" in args:
        return "recursive permission change of /"
    return None


def _sandbox(
    leaves: Sequence[_Leaf], groups: Sequence[tuple[str, list[str]]], options: Mapping[str, Any]
) -> Rejection | None:
    found = _Findings()
    add = found.add

    allow_newlines = options.get("allow_newlines") is True
    for path, text in _strings(leaves):
        lowered = unicodedata.normalize("NFKC", text).lower()
        if not allow_newlines and _LINE_BREAKS.search(lowered):
            add(path, "Line break in an argument (command injection)")
        for meta, why in _SANDBOX_METACHARACTERS:
            if meta in lowered:
                add(path, f"Blocked shell metacharacter: {meta!r} ({why})")
                break
        if _VARIABLE.search(lowered):
            add(path, "Blocked shell metacharacter: '$' (variable expansion or quoting)")
        if _BRACE_EXPANSION.search(lowered):
            add(path, "Blocked shell metacharacter: '{,}' (brace expansion)")
        for reading in (lowered, _deobfuscate(text)):
            if _is_fork_bomb(reading):
                add(path, "Blocked pattern: fork bomb")
            for pattern, label in _SANDBOX_PATTERNS:
                if pattern.search(reading):
                    add(path, f"Blocked pattern: {label}")
        if path.endswith("#key") and not any(c.isspace() for c in text):
            continue  # a plain member name is a name, not a command line
        for command, args in _commands(text):
            danger = _sandbox_command(command, args)
            if danger is not None:
                add(path, f"Blocked command: {_quote(command)} ({danger})")
    for path, parts in groups:
        line = " ".join(parts)
        for command, args in _commands(line):
            danger = _sandbox_command(command, args)
            if danger is not None:
                add(path, f"Blocked command: {_quote(command)} ({danger})")
        for pattern, label in _SANDBOX_PATTERNS:
            if pattern.search(_deobfuscate(line)):
                add(path, f"Blocked pattern: {label}")
    if not found.violations:
        return None
    return Rejection(
        "sandbox",
        f"The sandbox validator refused the arguments: {found.violations[0]}.",
        tuple(found.violations),
        remediation_hint=(
            "Pass a single plain command without shell operators, privilege escalation or destructive flags."
        ),
        path=found.first,
    )


# ---- readonly ----------------------------------------------------------------------------------

_WRITE_COMMANDS = frozenset(
    "rm rmdir mv cp touch mkdir tee dd truncate ln install chmod chown chgrp shred unlink rsync scp "
    "patch mkfifo mknod fallocate split csplit".split()
)
_GIT_WRITES = frozenset(
    "commit push reset rebase merge checkout clean rm mv add stash tag branch cherry-pick revert apply am pull "
    "init clone".split()
)
_SQL_WRITE = re.compile(
    r"\b(insert\s+(or\s+\w+\s+)?into|update\s+[\w.\"`\[\]]+\s+set|delete\s+from\s+[\w.\"`\[\]]+\s*(?:$|;|where\b|returning\b|using\b|as\b|limit\b|order\b)"
    r"|drop\s+(table|database|schema|index|view|trigger|function|procedure|user|role|sequence)"
    r"|create\s+(or\s+replace\s+)?(temp(orary)?\s+)?(table|database|schema|index|unique\s+index|view|trigger|function|procedure|user|role|sequence)"
    r"|alter\s+(table|database|schema|index|view|user|role|sequence)|truncate\s+(table\s+)?[\w.\"`\[\]]+"
    r"|replace\s+into|merge\s+into|upsert\s+into|grant\s+\w+(\s*,\s*\w+)*\s+on|revoke\s+\w+(\s*,\s*\w+)*\s+on"
    r"|attach\s+database|copy\s+[\w.\"]+\s+from|load\s+data|into\s+(outfile|dumpfile)\b"
    r"|pragma\s+\w+\s*=|vacuum\b)",
    re.IGNORECASE,
)
_REDIRECT = re.compile(r"(^|[^<>=!\-])>{1,2}\|?\s*(/|~|\.{1,2}/|\$|[A-Za-z_][\w-]*\.\w+|[\w-]+/)")
_SED_IN_PLACE = re.compile(r"\b(sed|perl)\s+(-\w*\s+)*-[a-z]*i")
_APPEND_REDIRECT = re.compile(r">>\s*\S|\d>\s*[^&\s]|&>\s*\S|>\|")
_SQL_COMMENT = re.compile(r"/\*!?\d*|\*/")
_HTTP_WRITE_FLAG = re.compile(
    r"(?:-X|--request|--method)[=\s]*['\"]?(post|put|patch|delete)\b"
    r"|--post-(?:data|file)\b|\bhttp\s+(post|put|patch|delete)\b",
    re.IGNORECASE,
)
_CURL_BODY = re.compile(r"\s(?:-d|--data(?:-[a-z]+)?|-F|--form|-T|--upload-file)(?:\s|=|$)")
_GRAPHQL_MUTATION = re.compile(r"^\s*mutation\b", re.IGNORECASE)
_DOCUMENT_WRITE = re.compile(
    r"\.(?:insert|update|delete|replace)(?:one|many)?\s*\(|\.(?:drop|remove|bulkwrite|findoneand\w+)\s*\("
    r"|\b(?:flushall|flushdb)\b",
    re.IGNORECASE,
)
_WRITE_METHODS = frozenset({"post", "put", "patch", "delete"})
_WRITE_MODES = re.compile(r"^[rwaxb+t]*[wax+][rwaxb+t]*$")
_WRITE_FLAGS = frozenset(
    "write overwrite append delete remove create truncate erase destroy purge drop save persist commit "
    "upsert insert update modify mutate".split()
)


def _readonly(
    leaves: Sequence[_Leaf], groups: Sequence[tuple[str, list[str]]], options: Mapping[str, Any]
) -> Rejection | None:
    found = _Findings()
    add = found.add

    def command_line(path: str, text: str) -> None:
        for command, args in _commands(text):
            if command in _WRITE_COMMANDS:
                add(path, f"Write command: {command!r}")
            elif command == "git":
                for arg in args:
                    if arg in _GIT_WRITES:
                        add(path, f"Write command: 'git {arg}'")
                        break

    for leaf in leaves:
        words = _key_words(leaf.key)
        if leaf.path.endswith("#key"):
            continue
        if isinstance(leaf.value, bool):
            if leaf.value and any(w in _WRITE_FLAGS for w in words):
                add(leaf.path, f"Write flag: {_quote(leaf.key)} is true")
            continue
        if not isinstance(leaf.value, str):
            continue
        text = leaf.value
        lowered = text.strip().lower()
        if ("method" in words or "verb" in words) and lowered in _WRITE_METHODS:
            add(leaf.path, f"Write HTTP method: {text.strip().upper()}")
        if ("mode" in words or "flags" in words) and (_WRITE_MODES.match(lowered) or lowered in _WRITE_FLAGS):
            add(leaf.path, f"Write file mode: {_quote(text.strip())}")
        if any(w in ("operation", "op", "action") for w in words) and lowered in _WRITE_FLAGS:
            add(leaf.path, f"Write operation: {lowered!r}")
        sql = _SQL_WRITE.search(_SQL_COMMENT.sub(" ", text))
        if sql is not None:
            add(leaf.path, "SQL that writes: " + sql.group(0).split()[0].upper())
        if _REDIRECT.search(text) or _APPEND_REDIRECT.search(text):
            add(leaf.path, "Output redirection (writes a file)")
        if _OPEN_WRITE.search(text):
            add(leaf.path, "Write file mode: open(..., write mode)")
        if _HTTP_WRITE_FLAG.search(text) or (re.search(r"\bcurl\b", text) and _CURL_BODY.search(text)):
            add(leaf.path, "Write HTTP method in a command line")
        if _GRAPHQL_MUTATION.search(text):
            add(leaf.path, "GraphQL mutation")
        if _DOCUMENT_WRITE.search(text):
            add(leaf.path, "Document-store write")
        if _SED_IN_PLACE.search(text.lower()):
            add(leaf.path, "In-place edit (sed -i)")
        command_line(leaf.path, text)
    for path, parts in groups:
        command_line(path, " ".join(parts))
    if not found.violations:
        return None
    return Rejection(
        "readonly",
        f"The readonly validator refused the arguments: {found.violations[0]}. This tool may only read.",
        tuple(found.violations),
        remediation_hint="Use a read-only form of the request, or a tool that is allowed to write.",
        path=found.first,
    )
