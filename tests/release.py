"""The release as users get it: the sdist and the wheel built as ``python -m build`` builds
them, once per test session, and the wheel installed into a directory of its own (its
dependencies come from the test environment), so a test can put that directory first on
``PYTHONPATH`` and run django-dsched from the wheel instead of this source tree."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from build import ProjectBuilder
from build.env import DefaultIsolatedEnv

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def dists(tmp_path_factory) -> dict[str, Path]:
    """The sdist and the wheel, built as ``python -m build`` builds a release (PEP 517,
    isolated): the sdist from the checkout, then the wheel from the sdist, each backend
    hook's requirements installed first. One isolated environment serves both builds: the
    command makes a second one for the wheel and installs the same ``build-system.requires``
    in it again (about a third of its CPU time)."""
    out = tmp_path_factory.mktemp("dist")
    with DefaultIsolatedEnv() as env:
        from_checkout = ProjectBuilder.from_isolated_env(env, ROOT)
        env.install(from_checkout.build_system_requires)
        env.install(from_checkout.get_requires_for_build("sdist"))
        sdist = Path(from_checkout.build("sdist", out))

        unpacked = tmp_path_factory.mktemp("sdist")
        with tarfile.open(sdist) as archive:
            archive.extractall(unpacked, filter="data")
        [top] = unpacked.iterdir()
        assert (top / "PKG-INFO").is_file(), list(top.iterdir())
        from_sdist = ProjectBuilder.from_isolated_env(env, top)
        # The sdist's pyproject.toml asks for what the checkout's did: nothing more to install.
        env.install(from_sdist.build_system_requires - from_checkout.build_system_requires)
        env.install(from_sdist.get_requires_for_build("wheel"))
        wheel = Path(from_sdist.build("wheel", out))
    assert {sdist, wheel} == set(out.iterdir())
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
