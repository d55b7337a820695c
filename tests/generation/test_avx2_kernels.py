"""The determinism and decode-step tests again on AVX2 kernels, on a CPU with larger ones.

The batch invariance that makes shared rows and prefixes exact rests on the CPU's kernels (AVX2 and AVX-512 sum a
softmax in different lanes, MKL blocks a matrix product by row count; dsgen probes them,
``dsgen/generation/invariance.py``), and dsgen lands on AVX2, AVX-512 and AMX machines alike. On an AVX-512 machine
this module runs those tests once more in a process whose PyTorch and MKL dispatch is capped at AVX2 (an AVX2-only
CPU emulated), as one unit of ``make test``'s pool; on an AVX2-only CPU the suite itself is that run. ``make
test-avx2`` runs this module alone.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
DETERMINISM_TESTS = ("tests/generation/test_invariance.py", "tests/generation/test_decode_step.py",
                     "tests/generation/test_decoding.py", "tests/generation/test_debiased.py")
AVX2_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
# the inner run checks that the cap took before it collects anything
RUN = ("import sys, torch, pytest; capability = torch.backends.cpu.get_cpu_capability(); "
       "sys.exit(f'PyTorch dispatches {capability} kernels, not AVX2') if capability != 'AVX2' else None; "
       "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', *sys.argv[1:]]))")


def test_the_determinism_tests_pass_on_avx2_kernels():
    capability = torch.backends.cpu.get_cpu_capability()
    if not capability.startswith("AVX512"):
        pytest.skip(f"this CPU runs {capability} kernels: the suite itself is the run on them (no larger ones to cap)")
    # a process of its own, not one of xdist's workers: pytest's own variables stay out of it
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | AVX2_KERNELS
    out = subprocess.run([sys.executable, "-c", RUN, *DETERMINISM_TESTS], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=1800)
    assert out.returncode == 0, (out.stdout + out.stderr)[-6000:]
    assert " passed" in out.stdout.splitlines()[-1] and " skipped" not in out.stdout.splitlines()[-1], out.stdout[-2000:]
