"""The determinism and decode-step tests again on other CPUs' kernels, emulated on this one.

The batch invariance that makes shared rows and prefixes exact rests on the CPU's kernels (AVX2 and AVX-512 sum a
softmax in different lanes, MKL blocks a matrix product by row count; dsgen probes them,
``dsgen/generation/invariance.py``), and dsgen lands on AVX2, AVX-512 and AMX machines, AMD and Intel alike. Each test
here runs those tests once more in a process of its own (not one of xdist's workers, so that pytest's own variables
stay out of it), as one unit of ``make test``'s pool; ``make test-kernels`` runs this module alone:

- **AVX2 kernels** on a CPU with AVX-512: PyTorch's, MKL's and oneDNN's dispatch capped at AVX2 (an AVX2-only CPU:
  oneDNN's multiply runs the core's linear layers, so its cap is part of the emulation). On an AVX2-only CPU the suite
  itself is that run.
- **An Intel Xeon's MKL** (AVX-512 without bfloat16 or AMX) on an AMD CPU with AVX-512: MKL runs its Intel code
  paths on Intel CPUs only, asking ``mkl_serv_intel_cpu_true()``; a two-line library preloaded in its place answers
  yes, ``MKL_ENABLE_INSTRUCTIONS=AVX512_E1`` picks the path of an AVX-512 CPU with VNNI and no bfloat16, and oneDNN is
  capped at the same instructions (``ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI``). The probe then finds the row counts an
  Intel Xeon reported (16-56, 256, 257, 384, 512). On an Intel CPU the suite itself is that run; without a C compiler
  the test says so and skips.
- **An Intel CPU's MKL with AVX-512 and bfloat16** on an AMD CPU with AVX-512 and bfloat16: the same library with
  ``MKL_ENABLE_INSTRUCTIONS=AVX512_E3`` (AVX-512 with VNNI and bfloat16), oneDNN at ``AVX512_CORE_BF16``. It is an
  Intel Xeon with bfloat16's path, and the nearest to an AMX CPU's that runs here: asked for its AMX path
  (``AVX512_E4``), MKL on a CPU without AMX takes this one, and neither library multiplies float32 on AMX tiles
  unless told to (MKL's ``MKL_BLAS_COMPUTE_MODE``, PyTorch's ``torch.backends.mkldnn.matmul.fp32_precision``).
- **An Intel CPU's AVX2 MKL** on an AMD CPU (AVX2 or AVX-512): the same library, with the AVX2 pass's caps. It is
  what an Intel AVX2-only CPU runs, and what the AVX2 pass above runs on an Intel CPU with AVX-512, so CI there is the
  same run: MKL multiplies small matrices six rows at a time and gives a tail of one to three rows other
  bits, so a tiny model's rows get the bits of a large batch only in blocks of 4-6, 10-12, ... rows, and the last 8
  of 1024 or 2048 columns other bits on one thread than on two (``invariant_counts``, ``HEAD_BLOCK``).

The inner run checks, before it collects anything, that the kernels it was given are the ones it runs. Two tests of
what a process adds rather than what the kernels compute, and the two of what the real SmolLM2 writes (its exactness on
each kind is the real-generator probe's test, which runs in every pass) run on the machine's own kernels only
(``PROCESS_TESTS``).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dsgen.generation.invariance import mkl_code_path

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
DETERMINISM_TESTS = ("tests/generation/test_invariance.py", "tests/generation/test_decode_step.py",
                     "tests/generation/test_decoding.py", "tests/generation/test_debiased.py",
                     "tests/generation/test_prefill_step.py::test_a_probed_prefill_cuts_its_padding_and_keeps_the_bits"
                     "[False]",
                     "tests/generation/test_prefill_step.py::test_a_judges_score_does_not_depend_on_its_batch_here_"
                     "and_on_the_simulated_cpu[False]")
AVX2_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
AMD_MKL = "Intel(R) Architecture processors"  # MKL's path on an AMD CPU (mkl_code_path)
XEON_MKL = ("Intel(R) Advanced Vector Extensions 512 (Intel(R) AVX-512) with support of Intel(R) Deep Learning Boost "
            "(Intel(R) DL Boost)")  # AVX-512 with VNNI, no bfloat16 (that path adds "and bfloat16")
INTEL_AVX2_MKL = "Intel(R) Advanced Vector Extensions 2 (Intel(R) AVX2) enabled processors"
# what a process adds, not what the kernels do (hash order, a kill and a resume), and what the real SmolLM2 writes (its
# exactness on each kind is test_invariance's real-generator probe): run on the machine's own kernels only, so that
# the passes stay within CI's time (about 23 s and 25 s of each)
PROCESS_TESTS = ("tests/generation/test_debiased.py::test_same_file_in_processes_with_different_hash_seeds",
                 "tests/generation/test_debiased.py::test_resume_after_a_kill_at_a_random_moment_gives_the_same_file",
                 "tests/generation/test_debiased.py::test_real_smollm2_two_inputs",
                 "tests/generation/test_debiased.py::test_real_smollm2_chat_prompted")
XEON_KERNELS = {"MKL_ENABLE_INSTRUCTIONS": "AVX512_E1", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}
XEON_BF16_KERNELS = {"MKL_ENABLE_INSTRUCTIONS": "AVX512_E3", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}
XEON_BF16_MKL = XEON_MKL + " and bfloat16"  # AVX-512 with VNNI and bfloat16
INTEL_CPU = "int mkl_serv_intel_cpu_true(void) { return 1; }\nint mkl_serv_intel_cpu(void) { return 1; }\n"
# argv[1]: the kernels the run must see ("<PyTorch capability> | <MKL code path>"), then pytest's arguments
RUN = ("import sys, torch, pytest; from dsgen.generation.invariance import mkl_code_path; "
       "seen = f'{torch.backends.cpu.get_cpu_capability()} | {mkl_code_path()}'; "
       "sys.exit(f'the run sees {seen!r}, not {sys.argv[1]!r}') if seen != sys.argv[1] else None; "
       "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', *sys.argv[2:]]))")


def run_determinism_tests(kernels: dict[str, str], seen: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | kernels
    deselected = [f"--deselect={test}" for test in PROCESS_TESTS]
    out = subprocess.run([sys.executable, "-c", RUN, seen, *DETERMINISM_TESTS, *deselected], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, (out.stdout + out.stderr)[-6000:]
    last = out.stdout.splitlines()[-1]
    assert " passed" in last and " skipped" not in last, out.stdout[-2000:]


def test_the_determinism_tests_pass_on_avx2_kernels():
    capability = torch.backends.cpu.get_cpu_capability()
    if not capability.startswith("AVX512"):
        pytest.skip(f"this CPU runs {capability} kernels: the suite itself is the run on them (no larger ones to cap)")
    here = mkl_code_path()
    # MKL capped at AVX2: on an AMD CPU the path it runs on every AMD CPU, on an Intel CPU its Intel AVX2 path
    run_determinism_tests(AVX2_KERNELS, f"AVX2 | {here if here in ('', AMD_MKL) else INTEL_AVX2_MKL}")


def intel_cpu_library(tmp_path: Path) -> Path:
    """A library that, preloaded, makes MKL on an AMD CPU take its Intel code paths (skips without a C compiler)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler (cc) to build the library that makes MKL take its Intel code paths")
    (tmp_path / "intel_cpu.c").write_text(INTEL_CPU)
    library = tmp_path / "libintelcpu.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(tmp_path / "intel_cpu.c")], check=True)
    return library


@pytest.mark.parametrize("kernels, seen, bfloat16", [(XEON_KERNELS, XEON_MKL, False),
                                                     (XEON_BF16_KERNELS, XEON_BF16_MKL, True)],
                         ids=["without-bfloat16", "with-bfloat16"])
def test_the_determinism_tests_pass_on_an_intel_xeons_mkl(tmp_path, kernels, seen, bfloat16):
    capability, path = torch.backends.cpu.get_cpu_capability(), mkl_code_path()
    if (not capability.startswith("AVX512") or (bfloat16 and not torch.cpu._is_avx512_bf16_supported())
            or path != AMD_MKL):
        pytest.skip(f"this CPU runs {capability} kernels and MKL's {path or 'no'} code path: an Intel Xeon's MKL is "
                    f"emulated on an AMD CPU with AVX-512{' and bfloat16' if bfloat16 else ''} only (on an Intel CPU "
                    "the suite itself is the run)")
    # a probe stored under this CPU's key must not be read: MKL's path is part of the key, so it is not
    run_determinism_tests({**kernels, "LD_PRELOAD": str(intel_cpu_library(tmp_path))}, f"AVX512 | {seen}")


def test_the_determinism_tests_pass_on_an_intel_avx2_cpus_mkl(tmp_path):
    path = mkl_code_path()
    if path != AMD_MKL:
        pytest.skip(f"MKL runs its {path or 'no'} code path here: an Intel CPU's AVX2 path is emulated on an AMD CPU "
                    "only (on an Intel CPU the AVX2 pass above, or the suite itself, is the run)")
    run_determinism_tests({**AVX2_KERNELS, "LD_PRELOAD": str(intel_cpu_library(tmp_path))},
                          f"AVX2 | {INTEL_AVX2_MKL}")
