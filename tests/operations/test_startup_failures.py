"""Issue 21 (start-up failures): each is one line naming the file, endpoint or setting, exit 2.

Before, a missing config or references file, a bad TLS file and a corrupt store printed
Python tracebacks (exit 1). ``otel-eval serve`` runs in a fresh interpreter on free ports.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_single_instance import _serve, one_line_failure


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    line = one_line_failure(_serve("--config", str(missing)))
    assert f"config file {missing}: No such file or directory" in line


def test_a_missing_references_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "refs.jsonl"
    line = one_line_failure(_serve("--references", str(missing),
                                   "--store", str(tmp_path / "s.db")))
    assert f"references file {missing}: No such file or directory" in line


def test_a_corrupt_store_is_named(tmp_path: Path) -> None:
    db = tmp_path / "otel-eval.db"
    db.write_bytes(b"this is not a database" * 100)
    line = one_line_failure(_serve("--store", str(db)))
    assert f"store {db}: file is not a database" in line


@pytest.mark.parametrize("broken", ["missing", "garbage"])
def test_a_bad_tls_file_is_named(tmp_path: Path, broken: str) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    if broken == "garbage":
        cert.write_text("not a certificate")
        key.write_text("not a key")
    config = tmp_path / "c.yaml"
    config.write_text(f"receiver:\n  tls:\n    cert_file: {cert}\n    key_file: {key}\n")
    line = one_line_failure(_serve("--config", str(config), "--store", str(tmp_path / "s.db")))
    assert f"TLS (cert_file {cert}, key_file {key})" in line
