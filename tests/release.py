"""The release as users get it: the sdist and the wheel built by ``python -m build``, once per
test session, and the wheel installed into a directory of its own (its dependencies come
from the test environment), so a test can put that directory first on ``PYTHONPATH`` and
run django-dsched from the wheel instead of this source tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def dists(tmp_path_factory) -> dict[str, Path]:
    """The sdist and the wheel, built as a release is (PEP 517, isolated)."""
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    return {"sdist": sdist, "wheel": wheel}


@pytest.fixture(scope="session")
def installed_wheel(dists, tmp_path_factory) -> Path:
    """A directory holding the installed wheel (put it first on PYTHONPATH)."""
    site = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", site,
         str(dists["wheel"])],
        check=True,
        timeout=120,
    )  # fmt: skip
    return site
