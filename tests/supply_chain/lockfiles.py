"""Readers and checks for the supply-chain files in requirements/: the hash-pinned lock files
(written by scripts/lock), the known-bad releases, the SBOM (scripts/sbom) and the license
allow-list. Test support only: the service never reads these files.

The checks are plain functions returning what they found wrong, so each test can run them on
the real files and on a counter-example that must be caught.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "requirements"
SERVICE_LOCK = REQUIREMENTS / "service.txt"
DEV_LOCK = REQUIREMENTS / "dev.txt"
BUILD_LOCK = REQUIREMENTS / "build.txt"
TOOLS_LOCK = REQUIREMENTS / "tools.txt"
KNOWN_BAD = REQUIREMENTS / "known-bad.txt"
SBOM = REQUIREMENTS / "sbom.cdx.json"
LICENSES = REQUIREMENTS / "licenses.toml"
STARTUP_HOOKS = REQUIREMENTS / "startup-hooks.toml"

_HASH = re.compile(r"--hash=(sha256:[0-9a-f]{64})\b")


@dataclass(frozen=True)
class Pin:
    """One locked release: `name==version` with the hashes pip will accept for it."""

    name: str  # canonical (PEP 503) name
    version: str  # the exact version pinned with ==
    hashes: tuple[str, ...]  # "sha256:<hex>", one per published file of that release


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def read_lock(path: Path) -> dict[str, Pin]:
    """The pins of a `uv pip compile --generate-hashes` file, by canonical name. A requirement
    that is not an exact `==` pin, or has no hash, is an error: pip would refuse the file."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            pending += line[:-1] + " "
        elif line or pending:
            logical.append((pending + line).strip())
            pending = ""
    pins: dict[str, Pin] = {}
    for line in logical:
        req = Requirement(line.split(" --hash=", 1)[0])
        specs = list(req.specifier)
        if len(specs) != 1 or specs[0].operator != "==":
            raise ValueError(f"{path.name}: {line[:80]!r} is not an exact == pin")
        hashes = tuple(_HASH.findall(line))
        if not hashes:
            raise ValueError(f"{path.name}: {req.name} has no --hash")
        pins[canonicalize_name(req.name)] = Pin(canonicalize_name(req.name), specs[0].version,
                                                hashes)
    return pins


def known_bad(path: Path = KNOWN_BAD) -> dict[str, set[str]]:
    """Package name -> the releases that must never be installed (the file's `!=` versions)."""
    bad: dict[str, set[str]] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        ops = {s.operator for s in req.specifier}
        if ops != {"!="}:
            raise ValueError(f"{path.name}: {line!r} must list releases with != only")
        bad.setdefault(canonicalize_name(req.name), set()).update(
            s.version for s in req.specifier)
    return bad


def declared_dependencies(project: dict[str, Any]) -> list[str]:
    """Every requirement pyproject.toml declares: runtime, each optional extra, build."""
    deps = list(project["project"].get("dependencies", []))
    for extra in project["project"].get("optional-dependencies", {}).values():
        deps += extra
    return deps + list(project.get("build-system", {}).get("requires", []))


def allowed_bad_releases(requirements: list[str], bad: dict[str, set[str]]) -> list[str]:
    """The known-bad releases these requirement strings would still let pip install."""
    found = []
    for text in requirements:
        req = Requirement(text)
        for version in sorted(bad.get(canonicalize_name(req.name), ())):
            if req.specifier.contains(version, prereleases=True):
                found.append(f"{text!r} allows {req.name} {version}")
    return found


def missing_from_lock(requirements: list[str], pins: dict[str, Pin], lock: str) -> list[str]:
    """Requirements the lock does not satisfy: not pinned at all, or pinned outside the range."""
    problems = []
    for text in requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{req.name} (pyproject.toml: {text!r}) is missing from {lock}")
        elif not req.specifier.contains(pin.version, prereleases=True):
            problems.append(f"{lock} pins {req.name}=={pin.version}, outside {text!r}")
    return problems


def unlocked_dependencies(root: str, extras: set[str], pins: dict[str, Pin],
                          lock: str) -> list[str]:
    """What the installed ``root`` (with ``extras``) needs, transitively, that the lock does not
    pin within range. scripts/install passes --no-deps (pip resolves nothing), so the lock must
    be its own closure: each requirement's marker evaluated for the extras it was reached by."""
    from importlib.metadata import requires

    problems, seen = [], set()
    todo = [(canonicalize_name(root), frozenset(extras))]
    while todo:
        name, wanted = todo.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        for text in requires(name) or []:
            req = Requirement(text)
            if req.marker is not None and not any(
                    req.marker.evaluate({"extra": e}) for e in (wanted or {""})):
                continue
            dep = canonicalize_name(req.name)
            pin = pins.get(dep)
            if pin is None:
                problems.append(f"{name} needs {text!r}: missing from {lock}")
            elif not req.specifier.contains(pin.version, prereleases=True):
                problems.append(f"{name} needs {text!r}: {lock} pins {pin.version}")
            else:
                todo.append((dep, frozenset(req.extras)))
    return problems


def expression_allowed(expression: str, allowed: set[str]) -> bool:
    """Whether an SPDX license expression is satisfiable with the allowed ids: AND binds
    tighter than OR; a `WITH` exception, or anything unparsable, is never allowed (review it)."""
    tokens = re.findall(r"[()]|[^\s()]+", expression)
    pos = 0

    def term() -> bool:
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError(expression)
        tok = tokens[pos]
        pos += 1
        if tok == "(":
            value = either()
            if pos >= len(tokens) or tokens[pos] != ")":
                raise ValueError(expression)
            pos += 1
            return value
        if tok in ("AND", "OR", "WITH", ")") or (pos < len(tokens) and tokens[pos] == "WITH"):
            raise ValueError(expression)
        return tok in allowed

    def both() -> bool:
        nonlocal pos
        value = term()
        while pos < len(tokens) and tokens[pos] == "AND":
            pos += 1
            value = term() and value  # evaluate the term first: it advances pos
        return value

    def either() -> bool:
        nonlocal pos
        value = both()
        while pos < len(tokens) and tokens[pos] == "OR":
            pos += 1
            value = both() or value
        return value

    try:
        value = either()
    except ValueError:
        return False
    return value and pos == len(tokens)


def license_policy(path: Path = LICENSES) -> tuple[set[str], set[str]]:
    """(allowed SPDX ids, allowed license names) from requirements/licenses.toml."""
    policy = tomllib.loads(path.read_text(encoding="utf-8"))
    return set(policy["spdx"]), set(policy["names"])


def license_labels(component: dict[str, Any]) -> list[str]:
    """A CycloneDX component's licenses as text: expressions, SPDX ids, or names."""
    labels = []
    for entry in component.get("licenses", []):
        if "expression" in entry:
            labels.append(entry["expression"])
        else:
            lic = entry["license"]
            labels.append(lic.get("id") or lic.get("name", ""))
    return labels


def disallowed_licenses(components: list[dict[str, Any]], spdx: set[str],
                        names: set[str]) -> list[str]:
    """Components with no license, or with a license outside the allow-list. Every license a
    component lists must pass (cyclonedx-py lists the expression and the classifiers)."""
    found = []
    for comp in components:
        labels = license_labels(comp)
        bad = [lab for lab in labels if lab not in names and not expression_allowed(lab, spdx)]
        if not labels or bad:
            found.append(f"{comp['name']} {comp.get('version')}: {bad or 'no license'}")
    return found
