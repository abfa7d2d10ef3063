"""Only what pyproject.toml cannot say: probes/ (top level) ships inside the package as readtrace.probes."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["readtrace", "readtrace.*"]), "readtrace.probes"],
    package_dir={"readtrace.probes": "probes"},
)
