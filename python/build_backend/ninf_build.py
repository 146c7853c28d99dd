"""The package's PEP 517 build backend: maturin's, after the grid's own programs are built
and staged as the wheel's data, so that the wheel carries the grid.

``pip install ./python`` (or ``pip wheel ./python``) first runs, in the repository the
package lives in::

    cargo build --release --workspace --lib --bins --examples

(the debug build instead when maturin is asked for the ``dev`` profile, as the tests do) and
stages ``ninf``, ``ninf-server``, ``ninf-metaserver``, ``ninf-proxy``, ``ninf-gen``,
``ninf-gang-agent`` and the standard routines' ``ninf-exec-*`` as the wheel's scripts
(installed into the environment's ``bin/``: the ``ninf`` command is the grid's own CLI, and
``ninf up`` finds the servers beside it), and ``libninf_exec.a`` as its data (``lib/``, where
``ninf-gen build`` looks). Their debug information is stripped (``strip --strip-debug``).
Then maturin builds the extension module and the wheel (``[tool.maturin] data``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import maturin

PACKAGE = Path(__file__).resolve().parent.parent
WORKSPACE = PACKAGE.parent
STAGED = PACKAGE / "build" / "ninf.data"

PROGRAMS = ["ninf", "ninf-server", "ninf-metaserver", "ninf-proxy", "ninf-gen", "ninf-gang-agent"]


def _profile() -> str:
    args = os.environ.get("MATURIN_PEP517_ARGS", "").split()
    dev = "--profile" in args and args[args.index("--profile") + 1 :][:1] == ["dev"]
    return "debug" if dev else "release"


def _target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", WORKSPACE / "target"))


def _copy(source: Path, destination: Path) -> None:
    shutil.copy2(source, destination)
    if shutil.which("strip"):
        subprocess.run(["strip", "--strip-debug", str(destination)], check=True)


def stage() -> None:
    """Builds the grid's programs and stages them under ``build/ninf.data``."""
    if not (WORKSPACE / "Cargo.toml").is_file() or not (WORKSPACE / "cli").is_dir():
        raise RuntimeError(
            f"the wheel carries the grid's programs, built from the Ninf repository; "
            f"{PACKAGE} is not inside one"
        )
    profile = _profile()
    command = ["cargo", "build", "-q", "--workspace", "--lib", "--bins", "--examples"]
    if profile == "release":
        command.append("--release")
    subprocess.run(command, cwd=WORKSPACE, check=True)
    built = _target_dir() / profile
    executables = sorted(p.name for p in built.glob("ninf-exec-*") if p.suffix != ".d")
    if not executables:
        raise RuntimeError(f"no ninf-exec-* in {built}: the routines did not build")
    shutil.rmtree(STAGED, ignore_errors=True)
    scripts = STAGED / "scripts"
    lib = STAGED / "data" / "lib"
    scripts.mkdir(parents=True)
    lib.mkdir(parents=True)
    for name in PROGRAMS + executables:
        _copy(built / name, scripts / name)
    shutil.copy2(built / "libninf_exec.a", lib / "libninf_exec.a")


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    stage()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    stage()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    return maturin.build_sdist(sdist_directory, config_settings)


get_requires_for_build_wheel = maturin.get_requires_for_build_wheel
get_requires_for_build_sdist = maturin.get_requires_for_build_sdist
get_requires_for_build_editable = maturin.get_requires_for_build_editable


def _data_folder() -> None:
    # maturin checks that the data folder exists even when it writes only the metadata.
    STAGED.mkdir(parents=True, exist_ok=True)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _data_folder()
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    _data_folder()
    return maturin.prepare_metadata_for_build_editable(metadata_directory, config_settings)

if __name__ == "__main__":
    stage()
    print(f"staged the grid's programs under {STAGED}")
