"""The lock files pin what pyproject.toml declares, every pin hash-checked, none a known-bad
release; pyproject.toml's ranges exclude the known-bad releases; the environment the tests run
in is the one the lock describes (scripts/test installs it)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from lockfiles import (
    BUILD_LOCK,
    DEV_LOCK,
    KNOWN_BAD,
    REQUIREMENTS,
    ROOT,
    SERVICE_LOCK,
    TOOLS_LOCK,
    allowed_bad_releases,
    declared_dependencies,
    known_bad,
    missing_from_lock,
    pyproject,
    read_lock,
    unlocked_dependencies,
)
from packaging.requirements import Requirement

LOCKS = (SERVICE_LOCK, DEV_LOCK, BUILD_LOCK, TOOLS_LOCK)


def test_every_declared_dependency_is_locked_within_its_range() -> None:
    project = pyproject()
    runtime = project["project"]["dependencies"]
    dev = runtime + project["project"]["optional-dependencies"]["dev"]
    problems = (missing_from_lock(runtime, read_lock(SERVICE_LOCK), SERVICE_LOCK.name)
                + missing_from_lock(dev, read_lock(DEV_LOCK), DEV_LOCK.name)
                + missing_from_lock(project["build-system"]["requires"], read_lock(BUILD_LOCK),
                                    BUILD_LOCK.name))
    assert not problems, ("the lock files are behind pyproject.toml; run scripts/lock\n  "
                          + "\n  ".join(problems))


def test_the_supply_chain_tools_are_locked() -> None:
    tools = [ln.split("#", 1)[0].strip()
             for ln in (REQUIREMENTS / "tools.in").read_text(encoding="utf-8").splitlines()]
    problems = missing_from_lock([t for t in tools if t], read_lock(TOOLS_LOCK), TOOLS_LOCK.name)
    assert not problems, "run scripts/lock\n  " + "\n  ".join(problems)


def _commands(script: str) -> list[str]:
    """A shell script's lines without comments, continuation lines joined."""
    text = (ROOT / script).read_text(encoding="utf-8").replace("\\\n", " ")
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def test_ci_installs_only_from_the_lock_with_hashes() -> None:
    """.ci/run -> scripts/test -> scripts/install --dev: the lock, hash-checked, wheels only;
    then the package itself without dependencies or an unpinned build backend."""
    assert any(ln.endswith("scripts/test") for ln in _commands(".ci/run"))
    test = _commands("scripts/test")
    assert "scripts/install --dev" in test, test
    assert not [ln for ln in test if "pip" in ln and "install" in ln], test
    installs = [ln for ln in _commands("scripts/install") if "install --" in ln]
    locked, own = installs
    assert all(f in locked for f in ("--require-hashes", "--only-binary :all:", "--no-deps",
                                     '-r "$lock"', "-r requirements/build.txt")), locked
    assert all(f in own for f in ("--no-deps", "--no-build-isolation", "-e .")), own
    assert "--dev) lock=requirements/dev.txt" in " ".join(_commands("scripts/install"))


def test_missing_and_out_of_range_dependencies_are_reported() -> None:
    pins = read_lock(SERVICE_LOCK)
    problems = missing_from_lock(["not-a-locked-package>=1", "grpcio>=999",
                                  "colorama; sys_platform == 'win32'"], pins, "service.txt")
    assert len(problems) == 2, problems
    assert "not-a-locked-package" in problems[0] and "missing" in problems[0]
    assert "outside" in problems[1]


def test_the_test_environment_runs_the_service_pins() -> None:
    service, dev = read_lock(SERVICE_LOCK), read_lock(DEV_LOCK)
    differ = {n: (p.version, dev[n].version if n in dev else None)
              for n, p in service.items() if n not in dev or dev[n].version != p.version}
    assert not differ, f"service.txt vs dev.txt: {differ}; run scripts/lock"


def test_every_pin_is_exact_and_hashed() -> None:
    for lock in LOCKS:
        pins = read_lock(lock)  # raises on a range or a pin without --hash
        assert pins, lock
        assert all(h.startswith("sha256:") for p in pins.values() for h in p.hashes), lock


def test_a_lock_without_hashes_is_refused(tmp_path: Path) -> None:
    unhashed = tmp_path / "x.txt"
    unhashed.write_text("grpcio==1.60.0\n")
    with pytest.raises(ValueError, match="no --hash"):
        read_lock(unhashed)
    ranged = tmp_path / "y.txt"
    ranged.write_text("grpcio>=1.60 --hash=sha256:" + "0" * 64 + "\n")
    with pytest.raises(ValueError, match="not an exact"):
        read_lock(ranged)


def test_known_bad_list_names_litellm_credential_stealer_releases() -> None:
    bad = known_bad()
    assert {"1.82.7", "1.82.8"} <= bad["litellm"]


def test_pyproject_allows_no_known_bad_release() -> None:
    found = allowed_bad_releases(declared_dependencies(pyproject()), known_bad())
    assert not found, (f"pyproject.toml allows releases listed in {KNOWN_BAD.name}; exclude "
                       "them with != (as for litellm)\n  " + "\n  ".join(found))


@pytest.mark.parametrize(("requirement", "allowed"), [
    ("litellm>=1.50", ["1.82.7", "1.82.8"]),
    ("litellm>=1.50,!=1.82.7", ["1.82.8"]),
    ("litellm>=1.50,!=1.82.7,!=1.82.8", []),
    ("litellm[proxy]>=1.50,!=1.82.*", []),
    ("litellm>=1.83", []),
    ("litellm==1.82.8", ["1.82.8"]),
    ("LiteLLM>=1", ["1.82.7", "1.82.8"]),
])
def test_a_range_that_allows_a_known_bad_release_is_caught(requirement: str,
                                                           allowed: list[str]) -> None:
    found = allowed_bad_releases([requirement], {"litellm": {"1.82.7", "1.82.8"}})
    assert [f.rsplit(" ", 1)[1] for f in found] == allowed


def test_known_bad_file_lists_releases_with_not_equal_only(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("# comment\nlitellm<1.83\n")
    with pytest.raises(ValueError, match="!= only"):
        known_bad(bad)


def test_no_lock_pins_a_known_bad_release() -> None:
    bad = known_bad()
    pinned = [f"{lock.name}: {p.name}=={p.version}" for lock in LOCKS
              for p in read_lock(lock).values() if p.version in bad.get(p.name, ())]
    assert not pinned, pinned


def test_installed_packages_are_the_locked_releases() -> None:
    """scripts/test installs requirements/dev.txt before running the suite: the tests run on
    exactly the locked releases (packages outside the lock are not this test's concern)."""
    wrong = {}
    for pin in read_lock(DEV_LOCK).values():
        try:
            installed = version(pin.name)
        except PackageNotFoundError:
            installed = None
        if installed != pin.version:
            wrong[pin.name] = (pin.version, installed)
    assert not wrong, f"(locked, installed): {wrong}; run scripts/install --dev"


def test_the_lock_is_its_own_closure() -> None:
    """scripts/install resolves nothing (--no-deps): every package the installed otel-eval[dev]
    needs, through any chain of dependencies and extras, is pinned in the dev lock in range."""
    problems = unlocked_dependencies("otel-eval", {"dev"}, read_lock(DEV_LOCK), "dev.txt")
    assert not problems, problems


def test_a_dependency_missing_from_the_lock_is_found() -> None:
    pins = read_lock(DEV_LOCK)
    without = {n: p for n, p in pins.items() if n != "httpx"}
    problems = unlocked_dependencies("litellm", set(), without, "dev.txt")
    assert any("httpx" in p and "missing" in p for p in problems), problems


def test_pyproject_declares_ranges_not_pins() -> None:
    """Library users resolve otel-eval with their own packages: pyproject keeps ranges, the
    lock files carry the exact releases."""
    exact = [d for d in declared_dependencies(pyproject())
             if any(s.operator in ("==", "===") for s in Requirement(d).specifier)]
    assert not exact, exact
