"""The built wheel works on its own: installed (not -e) into a fresh venv, run outside the checkout.

Nothing is downloaded: the wheel is built without build isolation, installed with --no-deps
--no-index, and the fresh venv sees the test venv's dependencies through a .pth line (not its .pth
files, so the checkout's editable install stays out of it).
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import require
from workloads import ebpf_ready

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.ebpf]


def _run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                 str(ROOT)], cwd=out)
    assert done.returncode == 0, done.stderr
    [path] = out.glob("readtrace-*.whl")
    return path


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv (same base Python) with only the wheel installed; returns its bin/ directory."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    done = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    done = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                 "--no-index", str(wheel)])
    assert done.returncode == 0, done.stderr
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(purelib, "zz-test-dependencies.pth").write_text("".join(p + "\n" for p in site.getsitepackages()))
    return venv / "bin"


def test_the_wheel_ships_the_probes(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    probes = {Path(n).name for n in names if n.startswith("readtrace/probes/")}
    assert {p.name for p in (ROOT / "probes").iterdir() if p.suffix in (".c", ".h")} <= probes
    assert "readtrace/inject/shim_sitecustomize.py" in names and not any(n.startswith("tests/") for n in names)


def test_the_wheel_holds_no_test_harness(wheel):
    """The lab harness (servers, FUSE clients, cells, synthetic traces) stays in the repository (issue 27)."""
    names = zipfile.ZipFile(wheel).namelist()
    harness = [n for n in names if n.startswith(("lab/", "benchmarks/", "readtrace/compat/"))
               or n.endswith("/synthetic.py")]
    assert harness == [] and any(n.startswith("readtrace/analyze/") for n in names)


def test_installed_wheel_imports_from_itself(installed, tmp_path):
    code = ("import json, readtrace, readtrace.record.records, importlib.resources as r;"
            "print(json.dumps([readtrace.__file__, str(r.files('readtrace.probes'))]))")
    done = _run([str(installed / "python"), "-c", code], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    module, probes = json.loads(done.stdout)
    venv = str(installed.parent)
    assert module.startswith(venv) and probes.startswith(venv), (module, probes)


def test_installed_wheel_runs_doctor_and_records(installed, tmp_path):
    ok, why = ebpf_ready()
    require(ok, why)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    doctor = _run([str(installed / "readtrace"), "doctor"], cwd=tmp_path, env=env)
    assert doctor.returncode == 0 and "Traceback" not in doctor.stderr, doctor.stdout + doctor.stderr
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(1 << 20))
    trace = tmp_path / "t.rtrace"
    script = f"f = open({str(data)!r}, 'rb'); f.seek(4096); f.read(65536); f.close()"
    done = _run([str(installed / "readtrace"), "record", "-q", "-o", str(trace), "--", str(installed / "python"),
                 "-c", script], cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads((trace / "meta.json").read_text())["exit_code"] == 0
    report = _run([str(installed / "readtrace"), "report", "--json", str(trace)], cwd=tmp_path, env=env)
    assert report.returncode == 0, report.stderr
    [ours] = [f for f in json.loads(report.stdout)["files"] if f.get("path") == str(data)]
    assert ours["read_bytes"] == 65536  # the one read the probes saw, with its known size
