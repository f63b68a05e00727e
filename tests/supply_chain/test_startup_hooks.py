"""Nothing runs at Python or pytest start that is not ours or a known package's: every .pth
file in site-packages, sitecustomize/usercustomize module and pytest11 plugin of the running
environment is listed in requirements/startup-hooks.toml with the package that installed it
(as that package's RECORD says). A new release that ships one fails here before it ships."""

from __future__ import annotations

import importlib.util
import site
import tomllib
from fnmatch import fnmatch
from importlib.metadata import distributions, entry_points
from pathlib import Path
from typing import Any

from lockfiles import STARTUP_HOOKS
from packaging.utils import canonicalize_name

HOOK_FILES = (".pth", "sitecustomize.py", "usercustomize.py")


def _allowed() -> dict[str, list[dict[str, Any]]]:
    return tomllib.loads(STARTUP_HOOKS.read_text(encoding="utf-8"))


def _site_dirs() -> list[Path]:
    dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return sorted({Path(d).resolve() for d in dirs if Path(d).is_dir()})


def _owners() -> dict[Path, str]:
    """Installed hook files -> the distribution whose RECORD lists them."""
    owners: dict[Path, str] = {}
    for dist in distributions():
        for f in dist.files or ():
            if f.name.endswith(HOOK_FILES):
                owners[Path(str(dist.locate_file(f))).resolve()] = canonicalize_name(
                    dist.metadata["Name"])
    return owners


def _runs_code(pth: Path) -> bool:
    lines = pth.read_text(encoding="utf-8", errors="replace").splitlines()
    return any(line.startswith(("import ", "import\t")) for line in lines)


def unexpected_pth(site_dirs: list[Path], owners: dict[Path, str],
                   allowed: list[dict[str, Any]]) -> list[str]:
    """.pth files not listed, or listed for another owner, with what they would do."""
    found = []
    for pth in (p for d in site_dirs for p in sorted(d.glob("*.pth"))):
        owner = owners.get(pth.resolve(), "")
        if not any(fnmatch(pth.name, a["file"]) and canonicalize_name(a["owner"]) == owner
                   for a in allowed):
            runs = ", runs code at every Python start" if _runs_code(pth) else ""
            found.append(f"{pth} (installed by {owner or 'no package'}{runs})")
    return found


def test_no_unexpected_pth_files() -> None:
    found = unexpected_pth(_site_dirs(), _owners(), _allowed()["pth"])
    assert not found, (f"unknown .pth files; remove them, or review and list them in "
                       f"{STARTUP_HOOKS.name}:\n  " + "\n  ".join(found))


def test_no_sitecustomize_or_usercustomize() -> None:
    owners = _owners()
    allowed = {(m["name"], canonicalize_name(m["owner"])) for m in _allowed().get("module", [])}
    found = []
    for name in ("sitecustomize", "usercustomize"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            owner = owners.get(Path(spec.origin).resolve(), "")
            if (name, owner) not in allowed:
                found.append(f"{spec.origin} (installed by {owner or 'no package'})")
    assert not found, found


def test_pytest_plugins_are_known() -> None:
    allowed = {(p["name"], canonicalize_name(p["owner"])) for p in _allowed()["pytest11"]}
    loaded = {(ep.name, canonicalize_name(ep.dist.name if ep.dist else ""))
              for ep in entry_points(group="pytest11")}
    assert not loaded - allowed, (f"pytest plugins not listed in {STARTUP_HOOKS.name}: "
                                  f"{sorted(loaded - allowed)}")


def test_a_planted_pth_is_caught(tmp_path: Path) -> None:
    """The check itself: an unowned .pth that runs code, an allowed name from the wrong package,
    and a listed one, in a scratch site directory."""
    (tmp_path / "litellm_init.pth").write_text("import os; os.system('steal')\n")
    (tmp_path / "distutils-precedence.pth").write_text("import os\n")
    (tmp_path / "ok.pth").write_text("/some/path\n")
    owners = {(tmp_path / "distutils-precedence.pth").resolve(): "evil-setuptools",
              (tmp_path / "ok.pth").resolve(): "good"}
    allowed = _allowed()["pth"] + [{"file": "ok.pth", "owner": "Good"}]
    found = unexpected_pth([tmp_path], owners, allowed)
    assert found == [
        f"{tmp_path / 'distutils-precedence.pth'} (installed by evil-setuptools, runs code at "
        "every Python start)",
        f"{tmp_path / 'litellm_init.pth'} (installed by no package, runs code at every Python "
        "start)",
    ]
