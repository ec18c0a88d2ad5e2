"""MGP's kernel-side validators (MGP 0.3 §4.5 and §7; draft 0.8 MGP_SECURITY §4.5, §4.6, §7), as pure functions.

One entry: :func:`validate` ``(validator_name, tool_arguments, options) -> Rejection | None``.

- ``sandbox``: dangerous shell patterns, shell metacharacters, recursive delete (§4.5), and what goes
  with them: fork bombs, privilege escalation, writes to or reads of raw devices, reverse shells,
  power-off, disk formatting (POSIX and Windows forms), line breaks (injection), variable, brace and
  wildcard expansion, quoting tricks (``r''m``, ``$'\\x72m'``) and Unicode look-alikes (NFKC).
- ``readonly``: arguments that imply a write (§4.5 "block any write operations"): write commands,
  redirections, SQL that changes data or schema, HTTP methods that change state, write file modes
  and write flags.
- ``network_restricted``: URLs and hosts pointing at localhost, private, CGNAT, link-local,
  unique-local or metadata addresses, after every encoding trick (``policies/netguard.py``; no DNS).
- ``code_safety``: the §7 framework at the declared level (``unrestricted``, ``standard``,
  ``strict``, ``readonly``), with blocked imports, blocked patterns, the import allowlist and the
  size limit; the rejection carries the §7.4 ``violations`` and ``hints``.
- ``none``: no kernel-side validation.

Invariants:

- **Every value is checked**: strings anywhere in the arguments, through nested objects and arrays,
  object keys included; for ``sandbox`` and ``readonly``, also each array of scalars and each
  object's scalar values read as one command line (``["rm", "-rf", "/"]``).
- **Fail closed**: an unknown validator name, arguments nested deeper than :data:`MAX_DEPTH` or
  with more than :data:`MAX_NODES` values are refused, never skipped: a protection someone asked for
  is never silently absent.
- **Pure and bounded**: no I/O, no DNS; patterns start only at word boundaries, use bounded or
  possessive quantifiers and no backreference scans, so a check stays about linear in the size of
  the arguments (tested with adversarial inputs of 100 KB).
- The spec names no concrete pattern list for ``sandbox`` or ``readonly``; the lists here are the
  gateway's reading of "dangerous shell patterns", "metacharacters", "recursive delete" and "write
  operations", tuned so that prose (``"rm"`` in a sentence, ``"format"`` as a word) passes.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from policies import netguard

VALIDATORS = ("sandbox", "readonly", "network_restricted", "code_safety", "none")
CODE_SAFETY_LEVELS = ("unrestricted", "standard", "strict", "readonly")

MAX_DEPTH = 64
MAX_NODES = 100_000
DEFAULT_MAX_CODE_SIZE_BYTES = 10_000  # the §7.3 example; strict and readonly need a limit

# §14.7.3 rejection codes: CODE_UNSAFE is the registry's; the registry has none for the other
# validators, so they carry the §14.3 name of their error code (1010).
CODE_UNSAFE = "CODE_UNSAFE"
VALIDATION_BLOCKED = "VALIDATION_BLOCKED"


@dataclass(frozen=True, slots=True)
class Rejection:
    """A validator's "no": enough for the §14.7 rejection envelope and, for ``code_safety``, §7.4."""

    validator: str
    reason: str
    violations: tuple[str, ...]
    code: str = VALIDATION_BLOCKED
    remediation_hint: str = ""
    retryable: bool = True  # a different call may pass (§14.7.2: false only when nothing can)
    hints: Mapping[str, Any] | None = None
    path: str | None = None  # where in the arguments the first violation is (``$.args[2]``)

    def envelope(self) -> dict[str, Any]:
        """The §14.7.2 rejection body, with the §7.4 ``violations``/``hints`` as extra keys."""
        body: dict[str, Any] = {
            "status": "rejected",
            "reason": self.reason,
            "retryable": self.retryable,
            "remediation_hint": self.remediation_hint,
            "code": self.code,
            "validator": self.validator,
            "violations": list(self.violations),
        }
        if self.hints is not None:
            body["hints"] = dict(self.hints)
        if self.path is not None:
            body["path"] = self.path
        return body


# ---- walking the arguments ---------------------------------------------------------------------

ECHO_LIMIT = 64


def _quote(text: str) -> str:
    """``text`` quoted for a violation, cut to :data:`ECHO_LIMIT` characters: a rejection's reason
    enters an LLM's context and an operator's screen (§14.7.6), so what a caller wrote is echoed
    only briefly."""
    return repr(text if len(text) <= ECHO_LIMIT else text[:ECHO_LIMIT] + "...")


# Keys that name the program of a command line: their value is read first when an object's values
# are joined into one command line ({"args": ["-rf", "/"], "command": "rm"} is "rm -rf /").
_COMMAND_KEYS = frozenset("command cmd program executable exe binary bin tool run shell".split())


class _TooDeep(Exception):
    pass


@dataclass(slots=True)
class _Leaf:
    path: str
    key: str  # the nearest object key above the value ("" at the top or in a bare array)
    value: str | int | float | bool | None


def _walk(arguments: Any) -> tuple[list[_Leaf], list[tuple[str, list[str]]]]:
    """(every scalar leaf and object key, every group of scalars read as one command line)."""
    leaves: list[_Leaf] = []
    groups: list[tuple[str, list[str]]] = []
    stack: list[tuple[str, str, Any, int]] = [("$", "", arguments, 0)]
    nodes = 0
    while stack:
        path, key, value, depth = stack.pop()
        nodes += 1
        if depth > MAX_DEPTH or nodes > MAX_NODES:
            raise _TooDeep
        if isinstance(value, Mapping):
            scalars: list[str] = []
            heads: list[str] = []
            for k, v in value.items():
                k = str(k)
                leaves.append(_Leaf(f"{path}.{k}#key", k, k))
                stack.append((f"{path}.{k}", k, v, depth + 1))
                into = heads if k.lower() in _COMMAND_KEYS else scalars
                if isinstance(v, str | int | float) and not isinstance(v, bool):
                    into.append(str(v))
                elif isinstance(v, list) and all(isinstance(i, str | int | float) for i in v):
                    into.extend(str(i) for i in v)
            scalars = heads + scalars
            if len(scalars) > 1:
                groups.append((path, scalars))
        elif isinstance(value, list | tuple):
            if len(value) > 1 and all(isinstance(i, str | int | float) for i in value):
                groups.append((path, [str(i) for i in value]))
            for index in range(len(value) - 1, -1, -1):
                stack.append((f"{path}[{index}]", key, value[index], depth + 1))
        elif value is None or isinstance(value, str | int | float | bool):
            leaves.append(_Leaf(path, key, value))
        else:
            leaves.append(_Leaf(path, key, str(value)))
    return leaves, groups


def _strings(leaves: Sequence[_Leaf]) -> Iterator[tuple[str, str]]:
    for leaf in leaves:
        if isinstance(leaf.value, str):
            yield leaf.path, leaf.value


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
    violations: list[str] = []
    first: str | None = None

    def add(path: str, message: str) -> None:
        nonlocal first
        if message not in violations:
            violations.append(message)
        first = first or path

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
    if not violations:
        return None
    return Rejection(
        "sandbox",
        f"The sandbox validator refused the arguments: {violations[0]}.",
        tuple(violations),
        remediation_hint=(
            "Pass a single plain command without shell operators, privilege escalation or destructive flags."
        ),
        path=first,
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


def _key_words(key: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


def _readonly(
    leaves: Sequence[_Leaf], groups: Sequence[tuple[str, list[str]]], options: Mapping[str, Any]
) -> Rejection | None:
    violations: list[str] = []
    first: str | None = None

    def add(path: str, message: str) -> None:
        nonlocal first
        if message not in violations:
            violations.append(message)
        first = first or path

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
    if not violations:
        return None
    return Rejection(
        "readonly",
        f"The readonly validator refused the arguments: {violations[0]}. This tool may only read.",
        tuple(violations),
        remediation_hint="Use a read-only form of the request, or a tool that is allowed to write.",
        path=first,
    )


# ---- network_restricted ------------------------------------------------------------------------

_HOST_KEYS = frozenset(
    "host hostname url uri urls uris endpoint address addr ip ipv4 ipv6 server domain proxy href link origin "
    "webhook callback redirect target remote upstream destination dest".split()
)
# Keys under which even a bare number is an address ({"ip": 2130706433}); under the others
# ("target": 3) a bare number stays a number.
_ADDRESS_KEYS = frozenset("host hostname address addr ip ipv4 ipv6 server".split())


def _names(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list | tuple) else []


def _network(leaves: Sequence[_Leaf], options: Mapping[str, Any]) -> Rejection | None:
    allowed = _names(options.get("allowed_hosts"))
    blocked = _names(options.get("blocked_hosts"))
    violations: list[str] = []
    first: str | None = None
    for leaf in leaves:
        words = _key_words(leaf.key)
        # the key names a host when its last word does (``target_host``, ``callback_url``; not ``ip_count``)
        host_position = bool(words) and words[-1] in _HOST_KEYS and not leaf.path.endswith("#key")
        verdicts: list[netguard.HostVerdict] = []
        if isinstance(leaf.value, str):
            verdicts = netguard.refused_hosts(
                leaf.value,
                host_position=host_position,
                short_forms=bool(words) and words[-1] in _ADDRESS_KEYS,
                allowed=allowed,
                blocked=blocked,
            )
        elif host_position and words[-1] in _ADDRESS_KEYS and isinstance(leaf.value, int | float):
            # a number where a host goes is read as one: {"ip": 2130706433}, {"host": 127.1}
            verdict = netguard.check_host(repr(leaf.value), allowed=allowed, blocked=blocked)
            verdicts = [verdict] if verdict is not None else []
        for verdict in verdicts:
            message = f"Blocked destination: {verdict.reason}"
            if message not in violations:
                violations.append(message)
            first = first or leaf.path
    if not violations:
        return None
    return Rejection(
        "network_restricted",
        f"The network_restricted validator refused the arguments: {violations[0]}.",
        tuple(violations),
        remediation_hint=(
            "Use a public host name or address; local, private and metadata destinations are not reachable."
        ),
        path=first,
    )


# ---- code_safety (§7) --------------------------------------------------------------------------

DEFAULT_BLOCKED_IMPORTS = (
    "subprocess",
    "shutil",
    "socket",
    "ctypes",
    "multiprocessing",
    "pty",
    "signal",
    "fcntl",
    "resource",
    "importlib",
    "code",
    "codeop",
    "marshal",
    "pickle",
    "cffi",
    "builtins",
    "child_process",
    "fs",
    "net",
    "vm",
    "worker_threads",
)
DEFAULT_BLOCKED_PATTERNS = (
    "eval(",
    "exec(",
    "__import__(",
    "globals(",
    "locals(",
    "vars(",
    "getattr(",
    "setattr(",
    "delattr(",
    "__builtins__",
    "__subclasses__",
    "__globals__",
    "__code__",
    "__dict__",
    "__class__",
    "__bases__",
    "__mro__",
    "__getattribute__",
    "__loader__",
    "sys.modules",
    "breakpoint(",
    "os.system",
    "os.popen",
    "os.spawn",
    "os.exec",
    "os.fork",
    "os.posix_spawn",
    "os.startfile",
    "create_subprocess_",
    "os.kill",
    "new Function(",
    "process.binding",
)
# For the readonly level: what writes (files, processes, the network).
READONLY_WRITE_PATTERNS = (
    ".write(",
    ".writelines(",
    ".write_text(",
    ".write_bytes(",
    ".unlink(",
    ".rmdir(",
    ".mkdir(",
    ".touch(",
    ".rename(",
    ".replace(",
    ".chmod(",
    ".symlink_to(",
    "os.remove",
    "os.unlink",
    "os.rmdir",
    "os.removedirs",
    "os.makedirs",
    "os.mkdir",
    "os.rename",
    "os.replace",
    "os.truncate",
    "os.chmod",
    "os.chown",
    "os.putenv",
    "os.environ[",
    ".post(",
    ".put(",
    ".patch(",
    ".delete(",
    "writeFile",
    "appendFile",
    "unlinkSync",
    "rmSync",
)
_OPEN_WRITE = re.compile(r"""\bopen\s*\([^)]*['"][rbt]*[wax+][rwaxbt+]*['"]""")
_CODE_KEYS = frozenset("code source script program snippet python javascript js source_code sourcecode".split())


@dataclass(frozen=True, slots=True)
class CodeSafety:
    """The §7.3 ``code_safety`` declaration, read leniently (wrong types count as absent)."""

    level: str = "standard"
    language: str = "python"
    max_code_size_bytes: int | None = None
    blocked_imports: tuple[str, ...] = DEFAULT_BLOCKED_IMPORTS
    blocked_patterns: tuple[str, ...] = DEFAULT_BLOCKED_PATTERNS
    allowed_imports: tuple[str, ...] = ()
    code_fields: tuple[str, ...] = field(default=())

    @staticmethod
    def from_options(options: Mapping[str, Any]) -> CodeSafety:
        declared = options.get("code_safety")
        source: Mapping[str, Any] = declared if isinstance(declared, Mapping) else options
        level = source.get("level")
        size = source.get("max_code_size_bytes")
        return CodeSafety(
            level=level if isinstance(level, str) else "standard",
            language=str(source.get("language") or "python").lower(),
            max_code_size_bytes=size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None,
            blocked_imports=tuple(_names(source.get("blocked_imports"))) or DEFAULT_BLOCKED_IMPORTS,
            blocked_patterns=tuple(_names(source.get("blocked_patterns"))) or DEFAULT_BLOCKED_PATTERNS,
            allowed_imports=tuple(_names(source.get("allowed_imports"))),
            code_fields=tuple(_names(source.get("code_fields")) or _names(options.get("code_fields"))),
        )

    @property
    def size_limit(self) -> int | None:
        if self.level in ("strict", "readonly") and self.max_code_size_bytes is None:
            return DEFAULT_MAX_CODE_SIZE_BYTES
        return self.max_code_size_bytes

    def hints(self) -> dict[str, Any]:
        hints: dict[str, Any] = {"level": self.level, "blocked_imports": list(self.blocked_imports)}
        if self.level in ("strict", "readonly"):
            hints["allowed_imports"] = list(self.allowed_imports)
        if self.size_limit is not None:
            hints["max_code_size_bytes"] = self.size_limit
        return hints


_PY_IMPORT = re.compile(
    r"(?:^|[;:]|\n)\s*(?:import\s+([\w.\s,]+?)(?:\s+as\s+\w+)?(?=$|[;\n#])|from\s+([.\w]+)\s+import)", re.MULTILINE
)
_PY_DYNAMIC = re.compile(r"""(?:__import__|import_module)\s*\(\s*['"]([\w.]+)['"]""")
_JS_IMPORT = re.compile(
    r"""(?:\bfrom\s*|\brequire\s*\(\s*|\bimport\s*\(\s*|\bimport\s+)['"](?:node:)?([@\w./-]+)['"]"""
)


def _imports(code: str, language: str) -> list[str]:
    found: list[str] = []
    if language in ("javascript", "js", "typescript", "ts", "node"):
        found += _JS_IMPORT.findall(code)
    else:
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        if tree is not None:
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    found += [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    found.append(node.module)
                    # ``from os import system`` names ``os.system`` as surely as ``os.system(...)`` does
                    found += [f"{node.module}.{alias.name}" for alias in node.names]
        for plain, origin in _PY_IMPORT.findall(code):
            found += [m.split()[0] for m in plain.split(",") if m.strip()] if plain else [origin]
    found += _PY_DYNAMIC.findall(code)
    return list(dict.fromkeys(m.strip().lstrip(".") for m in found if m.strip().lstrip(".")))


def _covered(module: str, names: Sequence[str]) -> bool:
    return any(module == n or module.startswith(n + ".") or module.startswith(n + "/") for n in names)


def _contains(code: str, pattern: str) -> bool:
    """``pattern`` in ``code``; one that starts with a name must start a name there (``eval(`` is not
    found in ``literal_eval(``, ``os.system`` is not found in ``myos.system``)."""
    if not pattern:
        return False
    if pattern[0].isalnum() or pattern[0] == "_":
        return re.search(r"(?<![\w])" + re.escape(pattern), code) is not None
    return pattern in code


def check_code(code: str, spec: CodeSafety) -> list[str]:
    """The §7.4 violations of one piece of code at the declared level (empty when it passes)."""
    if spec.level == "unrestricted":
        return []
    violations: list[str] = []
    size = len(code.encode("utf-8", "surrogatepass"))
    limit = spec.size_limit
    if limit is not None and size > limit:
        violations.append(f"Code too large: {size} bytes (max {limit})")
    normalised = unicodedata.normalize("NFKC", code)
    compact = re.sub(r"\s+", "", normalised)
    imported = _imports(normalised, spec.language)
    for module in imported:
        if _covered(module, spec.blocked_imports):
            violations.append(f"Blocked import: {_quote(module.split('.')[0])}")
        elif spec.level in ("strict", "readonly") and not _covered(module, spec.allowed_imports):
            violations.append(f"Import not in allowlist: {_quote(module.split('.')[0])}")
    for pattern in spec.blocked_patterns:
        bare = re.sub(r"\s+", "", pattern).rstrip("(")
        if _contains(normalised, pattern) or _contains(compact, re.sub(r"\s+", "", pattern)) or bare in imported:
            violations.append(f"Blocked pattern: {pattern!r}")
    if spec.level == "readonly":
        for pattern in READONLY_WRITE_PATTERNS:
            if pattern in compact:
                violations.append(f"Write operation: {pattern!r}")
        if _OPEN_WRITE.search(normalised):
            violations.append("Write operation: 'open(..., write mode)'")
    return list(dict.fromkeys(violations))


def _code_safety(leaves: Sequence[_Leaf], options: Mapping[str, Any]) -> Rejection | None:
    spec = CodeSafety.from_options(options)
    if spec.level not in CODE_SAFETY_LEVELS:
        return Rejection(
            "code_safety",
            f"Code validation failed: unknown code safety level {spec.level!r}.",
            (f"Unknown code safety level: {spec.level!r}",),
            code=CODE_UNSAFE,
            remediation_hint="The operator must declare one of: " + ", ".join(CODE_SAFETY_LEVELS) + ".",
            retryable=False,
            hints=spec.hints(),
        )
    fields = {f.lower() for f in spec.code_fields}
    violations: list[str] = []
    first: str | None = None
    for leaf in leaves:
        if not isinstance(leaf.value, str) or leaf.path.endswith("#key"):
            continue
        if fields and leaf.key.lower() not in fields:
            continue
        found = check_code(leaf.value, spec)
        if found:
            first = first or leaf.path
            violations += [v for v in found if v not in violations]
    if not violations:
        return None
    return Rejection(
        "code_safety",
        "Code validation failed: " + "; ".join(violations[:5]) + ".",
        tuple(violations),
        code=CODE_UNSAFE,
        remediation_hint="Rewrite the code without the listed imports and patterns, within the size limit.",
        hints=spec.hints(),
        path=first,
    )


# ---- the entry ---------------------------------------------------------------------------------


def validate(validator_name: str, tool_arguments: Any, options: Mapping[str, Any] | None = None) -> Rejection | None:
    """Apply one MGP validator to a tool call's arguments: a :class:`Rejection`, or None to pass.

    ``options`` are the validator's settings: for ``code_safety`` the §7.3 declaration (either the
    declaration itself or ``{"code_safety": {...}}``, plus ``code_fields`` to name the arguments that
    hold code, default every string); for ``network_restricted`` ``allowed_hosts``/``blocked_hosts``;
    for ``sandbox`` ``allow_newlines``.
    """
    options = options or {}
    name = validator_name.strip().lower() if isinstance(validator_name, str) else ""
    if name == "none":
        return None
    if name not in VALIDATORS:
        return Rejection(
            name or "?",
            f"The tool declares the validator {validator_name!r}, which this gateway does not know; "
            "the call is refused rather than forwarded unchecked.",
            (f"Unknown validator: {validator_name!r}",),
            remediation_hint="The operator must configure one of: " + ", ".join(VALIDATORS) + ".",
            retryable=False,
        )
    try:
        leaves, groups = _walk(tool_arguments)
    except _TooDeep:
        return Rejection(
            name,
            f"The arguments are nested deeper than {MAX_DEPTH} levels or hold more than {MAX_NODES} values; "
            "they cannot be validated.",
            ("Arguments too deep or too large to validate",),
            code=CODE_UNSAFE if name == "code_safety" else VALIDATION_BLOCKED,
            remediation_hint="Send flatter, smaller arguments.",
        )
    if name == "sandbox":
        return _sandbox(leaves, groups, options)
    if name == "readonly":
        return _readonly(leaves, groups, options)
    if name == "network_restricted":
        return _network(leaves, options)
    return _code_safety(leaves, options)
