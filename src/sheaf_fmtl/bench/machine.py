"""Where and what was measured: the machine, and the library kernel (commit, hash of its files)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

import torch


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    try:
        info["cpu"] = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
        kib = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
        info["ram_gib"] = round(kib / (1 << 20), 1)
    except (OSError, StopIteration):
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def kernel_version() -> dict[str, Any]:
    """Which library kernel was measured: git commit, dirty flag, hash of the kernel files."""
    pkg = Path(__file__).resolve().parents[1]
    files = [pkg / "algorithms" / "sheaf_fmtl.py", pkg / "sheaf" / "ops.py"]
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in files if f.exists())).hexdigest()[:12]
    out: dict[str, Any] = {"kernel_sha256": digest}
    try:

        def git(*args: str) -> str:
            return subprocess.run(
                ["git", "-C", str(pkg), *args], capture_output=True, text=True, check=True
            ).stdout.strip()

        out["commit"] = git("rev-parse", "HEAD")
        out["branch"] = git("rev-parse", "--abbrev-ref", "HEAD")
        out["kernel_files_dirty"] = bool(git("status", "--porcelain", "--", *map(str, files)))
    except (OSError, subprocess.CalledProcessError):
        out["commit"] = "unknown"
    return out
