"""Peer tools run beside ours, each installed once into its own virtual environment under the
benchmark's work directory (never into the project's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def peer_command(work: Path, package: str, version: str, command: str) -> Path:
    """The console script `command` of `package==version`, installing it on first use."""
    venv = work / f"{package}-venv"
    exe = venv / "bin" / command
    if not exe.exists():
        print(f"installing {package}=={version} into {venv} (once; a few minutes)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"{package}=={version}"], check=True)
    return exe
