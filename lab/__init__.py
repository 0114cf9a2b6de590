"""lab: does seeing benchmark test data during pre-training inflate a code model's scores?"""
from __future__ import annotations

import os as _os
import platform as _platform

__version__ = "0.1.0"

# The instruction set of torch's CPU kernels on every x86-64 CPU that has it. AVX-512 kernels
# sum in another order than AVX2 ones, so the same recipe and seed computed other numbers on an
# AVX-512 CPU than on an AVX2-only one (docs/design.md, "Same numbers on every machine"); pinned, both
# compute the same, for 0.93x the speed on an AVX-512 CPU (benchmarks/cpu_isa.py). torch reads
# the variable at its first computation, so it is set when lab is imported, and every stage,
# worker and rank inherits it; an ATEN_CPU_CAPABILITY set by the user (avx512, default) is kept.
PINNED_CPU_CAPABILITY = "avx2"
# The libraries torch hands matrix products to choose their kernels by CPU themselves: MKL's
# conditional-numerical-reproducibility branch and oneDNN's instruction-set cap hold them to AVX2
# too. With the kernels alone pinned, the quickstart at 52f525d scored one of its 160 samples
# 8.84 BLEU on one 2-core EPYC and 14.11 on another (docs/design.md). Like the kernels' pin: set
# at import, inherited, and left alone where the user set the variable or ATEN_CPU_CAPABILITY.
PINNED_LIBRARY_ISA = {"MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def cpu_info(field: str) -> str | None:
    """A field of the first CPU in /proc/cpuinfo (Linux): "flags", "model name"; else None."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                if name.strip() == field:
                    return value.strip()
    except OSError:
        pass
    return None


def _pin_cpu_capability() -> None:
    if "ATEN_CPU_CAPABILITY" in _os.environ or _platform.machine().lower() not in ("x86_64", "amd64"):
        return
    if PINNED_CPU_CAPABILITY in (cpu_info("flags") or "").split():
        _os.environ["ATEN_CPU_CAPABILITY"] = PINNED_CPU_CAPABILITY
        for variable, value in PINNED_LIBRARY_ISA.items():
            _os.environ.setdefault(variable, value)


_pin_cpu_capability()
