"""MGP's ``code_safety`` validator (MGP 0.3 §7): blocked imports, blocked patterns, the import
allowlist and the size limit at the declared level; the entry is
:func:`policies.mgp_validators.validate`.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from policies.mgp_validator_core import (
    _OPEN_WRITE,
    CODE_SAFETY_LEVELS,
    CODE_UNSAFE,
    DEFAULT_MAX_CODE_SIZE_BYTES,
    Rejection,
    _Leaf,
    _names,
    _quote,
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
