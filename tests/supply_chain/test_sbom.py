"""The SBOM (requirements/sbom.cdx.json, written by scripts/sbom) describes exactly the locked
service packages, and every one of them carries a license on the allow-list
(requirements/licenses.toml)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from lockfiles import (
    BUILD_LOCK,
    SBOM,
    SERVICE_LOCK,
    disallowed_licenses,
    expression_allowed,
    license_policy,
    pyproject,
    read_lock,
)
from packaging.utils import canonicalize_name


def _bom() -> dict[str, Any]:
    return dict(json.loads(SBOM.read_text(encoding="utf-8")))


def test_sbom_is_cyclonedx_for_otel_eval() -> None:
    bom = _bom()
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] >= "1.5", bom["specVersion"]
    root = bom["metadata"]["component"]
    project = pyproject()["project"]
    assert (root["name"], root["version"]) == (project["name"], project["version"])
    assert [lic["license"]["id"] for lic in root["licenses"]] == [project["license"]["text"]]


def test_sbom_lists_exactly_the_locked_service_packages() -> None:
    locked = {n: p.version for lock in (SERVICE_LOCK, BUILD_LOCK)
              for n, p in read_lock(lock).items()}
    listed = {canonicalize_name(c["name"]): c["version"] for c in _bom()["components"]}
    stale = {n: (locked.get(n), listed.get(n)) for n in locked.keys() | listed.keys()
             if locked.get(n) != listed.get(n)}
    assert not stale, f"(locked, in SBOM): {stale}; run scripts/sbom"
    purls = [c["purl"] for c in _bom()["components"]]
    assert all(p.startswith("pkg:pypi/") for p in purls), purls


def test_every_component_license_is_allowed() -> None:
    spdx, names = license_policy()
    found = disallowed_licenses(_bom()["components"], spdx, names)
    assert not found, ("licenses outside requirements/licenses.toml (review, then add them "
                       "there with a reason):\n  " + "\n  ".join(found))


@pytest.mark.parametrize(("expression", "allowed"), [
    ("MIT", True),
    ("GPL-3.0-only", False),
    ("MIT OR GPL-3.0-only", True),
    ("MIT AND GPL-3.0-only", False),
    ("BSD-3-Clause AND 0BSD AND MIT AND Zlib AND CC0-1.0", True),
    ("(MIT OR GPL-2.0-only) AND Apache-2.0", True),
    ("GPL-2.0-only OR LGPL-3.0-only AND MIT", False),
    ("MIT AND (GPL-2.0-only OR AGPL-3.0-only)", False),
    ("GPL-2.0-or-later WITH Classpath-exception-2.0", False),
    ("MIT AND", False),
    ("(MIT", False),
    ("", False),
])
def test_license_expressions_are_evaluated(expression: str, allowed: bool) -> None:
    assert expression_allowed(expression, {"MIT", "Apache-2.0", "BSD-3-Clause", "0BSD", "Zlib",
                                           "CC0-1.0"}) is allowed


def test_a_component_under_a_license_not_on_the_list_is_reported() -> None:
    components = [
        {"name": "ok", "version": "1", "licenses": [{"license": {"id": "MIT"}}]},
        {"name": "copyleft", "version": "2", "licenses": [{"expression": "AGPL-3.0-only"}]},
        {"name": "mixed", "version": "3", "licenses": [
            {"license": {"id": "MIT"}}, {"license": {"name": "License :: Other/Proprietary"}}]},
        {"name": "bare", "version": "4"},
    ]
    assert disallowed_licenses(components, {"MIT"}, set()) == [
        "copyleft 2: ['AGPL-3.0-only']",
        "mixed 3: ['License :: Other/Proprietary']",
        "bare 4: no license",
    ]
