"""promtool: the rule file and scrape config check, and the rule unit tests pass; amtool: the
shipped Alertmanager config checks."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from grafana_files import ALERTMANAGER_YML, PROMETHEUS_YML, RULE_TESTS, RULES

pytestmark = pytest.mark.prometheus  # promtool


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    assert exe, "promtool missing: apt-get install -y prometheus (.ci/run installs it)"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.alertmanager
def test_alertmanager_config_check() -> None:
    exe = shutil.which("amtool")
    assert exe, "amtool missing: apt-get install -y prometheus-alertmanager (scripts/test)"
    r = subprocess.run([exe, "check-config", str(ALERTMANAGER_YML)], capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 inhibit rules" in r.stdout and "2 receivers" in r.stdout, r.stdout


def test_rules_check() -> None:
    r = _promtool("check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr


def test_scrape_config_check() -> None:
    r = _promtool("check", "config", str(PROMETHEUS_YML))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("path", RULE_TESTS, ids=[p.name for p in RULE_TESTS])
def test_rule_unit_tests(path: object) -> None:
    r = _promtool("test", "rules", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
