"""Shared fixtures: paths to the lithe binary and the default model (installed by scripts/setup.sh)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LITHE = Path(os.environ.get("LITHE_BIN", ROOT / "build" / "bin" / "lithe"))
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def lithe_bin() -> Path:
    assert LITHE.exists(), f"{LITHE} is missing: run scripts/setup.sh first"
    return LITHE


@pytest.fixture(scope="session")
def default_model() -> Path:
    assert DEFAULT_MODEL.exists(), f"{DEFAULT_MODEL} is missing: run scripts/setup.sh (it fetches the model)"
    return DEFAULT_MODEL


def run_lithe(*args, check=True, env=None):
    """Runs build/bin/lithe with args; returns the CompletedProcess (text mode)."""
    e = dict(os.environ, LITHE_LOG="warn")
    if env:
        e.update(env)
    p = subprocess.run([str(LITHE), *map(str, args)], capture_output=True, text=True, env=e, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"lithe {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


def run_json(*args):
    return json.loads(run_lithe(*args).stdout)
