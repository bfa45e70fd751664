# SPDX-License-Identifier: Apache-2.0
"""The package as installed and imported: its version against pyproject.toml and the
library's, __all__, and scripts/install.sh PREFIX."""
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

import normkernels as nk

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_version_is_pyprojects_and_the_librarys():
    pyproject = (ROOT / "python" / "pyproject.toml").read_text()
    assert nk.__version__ == re.search(r'^version = "(.*)"', pyproject, re.M).group(1)
    assert nk.version().split(".")[:2] == nk.__version__.split(".")[:2]


def test_all_names_every_public_function_and_class():
    public = {name for name, value in vars(nk).items()
              if not name.startswith("_") and callable(value)
              and getattr(value, "__module__", None) == "normkernels"}
    assert set(nk.__all__) == public
    namespace = {}
    exec("from normkernels import *", namespace)
    assert set(nk.__all__) <= set(namespace)


def test_importing_the_package_does_not_import_torch():
    """normkernels.torch is imported on its own: NumPy users need no torch."""
    code = "import sys, normkernels; assert 'torch' not in sys.modules, 'imported'"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


class LibraryOfVersion:
    """Stands for a loaded library reporting another version."""
    _name = "/elsewhere/libnormkernels.so.0"

    def __init__(self, version):
        self.version = version

    def nk_version(self):
        return self.version.encode()

    def __getattr__(self, name):  # the kernels, which the package looks up at import
        if name.startswith("nk_"):
            return lambda *args: 0
        raise AttributeError(name)


def import_afresh():
    """Runs the package's __init__ again, in a module of its own (normkernels stays)."""
    spec = importlib.util.find_spec("normkernels")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_library_of_another_major_minor_is_refused(monkeypatch):
    for version in ("0.2.0", "1.1.0"):
        monkeypatch.setattr(nk._library, "load", lambda: LibraryOfVersion(version))
        with pytest.raises(ImportError, match=rf"normkernels {nk.__version__} needs "
                           rf"libnormkernels 0\.1\.x; /elsewhere/libnormkernels.so.0 is "
                           rf"{version}"):
            import_afresh()
    monkeypatch.setattr(nk._library, "load", lambda: LibraryOfVersion("0.1.9"))
    assert import_afresh().__version__ == nk.__version__  # another patch: same ABI


def test_library_without_a_function_of_the_package_is_refused(monkeypatch):
    signatures = dict(nk._library._SIGNATURES, nk_planned_f32=(None, []))
    monkeypatch.setattr(nk._library, "_SIGNATURES", signatures)
    with pytest.raises(ImportError, match=r"\(libnormkernels 0\.1\.\d+\) has no "
                       "nk_planned_f32; it is older than this package"):
        nk._library.load()


@pytest.mark.skipif(importlib.util.find_spec("pip") is None,
                    reason="install.sh installs the package with pip (python3-pip)")
@pytest.mark.skipif(not os.environ.get("NK_BUILD_DIR"),
                    reason="needs NK_BUILD_DIR, a build tree to install (ctest sets it)")
def test_install_sh_installs_under_prefix_and_the_package_finds_it(tmp_path):
    """install.sh PREFIX, from the build tree ctest tests, with the package into a
    directory of its own: the package then loads PREFIX's library, with no
    NK_LIBRARY, LD_LIBRARY_PATH or source tree in sight."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("NK_LIBRARY", "LD_LIBRARY_PATH", "PYTHONPATH")}
    prefix, site = tmp_path / "prefix", tmp_path / "site"
    subprocess.run(["bash", str(ROOT / "scripts" / "install.sh"), str(prefix)],
                   env=dict(env, PIP_TARGET=str(site), PIP_NO_CACHE_DIR="1"),
                   check=True, capture_output=True)
    assert list(prefix.glob("include/normkernels.h"))
    library, = prefix.rglob("libnormkernels.so.0")
    code = ("import importlib.util, normkernels as nk, numpy as np; "
            "print(nk._lib._name); "
            "y = nk.layer_norm(np.arange(3, dtype=np.float32)); "
            "print([round(float(v), 4) for v in y]); "
            "print(importlib.util.find_spec('normkernels.torch').origin)")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True,
                         env=dict(env, PYTHONPATH=str(site)), capture_output=True,
                         text=True)
    assert run.stdout.split("\n")[:3] == [
        str(library), "[-1.2247, 0.0, 1.2247]",
        str(site / "normkernels" / "torch" / "__init__.py")]  # the subpackage too
