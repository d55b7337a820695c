"""Where the work runs (dsgen.scheduling.placement.Placement): one check of every Ray setting for every command, and
--cpus-per-worker as the threads a worker computes with on either backend."""

import pytest

from dsgen.errors import DsgenError
from dsgen.scheduling.base import DEFAULT_THREADS
from dsgen.scheduling.placement import Placement


def test_cpus_per_worker_is_the_threads_a_worker_computes_with_on_either_backend():
    import torch

    assert Placement().check().threads == DEFAULT_THREADS and Placement().scheduler() is None
    local = Placement("local", cpus_per_worker=1).check()
    assert local.threads == 1 and local.scheduler() is None and local.generation_backend() is None
    before = torch.get_num_threads()
    with local.computing():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with Placement().computing():  # not given: torch's own count
        assert torch.get_num_threads() == before


@pytest.mark.parametrize("placement,message", [
    (Placement("local", workers=2), "--address and --workers need --backend ray"),
    (Placement("local", address="auto"), "--address and --workers need --backend ray"),
    (Placement("local", cpus_per_worker=0), "--cpus-per-worker must be at least 1 (got 0)"),
    (Placement("ray", workers=0), "--workers must be at least 1 (got 0)"),
    (Placement("spark"), "unknown scheduler 'spark'"),
])
def test_a_bad_setting_is_one_line_before_any_work(placement, message):
    with pytest.raises(DsgenError, match=message.replace("(", r"\(").replace(")", r"\)")):
        placement.check()
    with pytest.raises(DsgenError):
        placement.generation_backend()  # generate checks the same settings (against its own backends' names)


def test_generate_names_its_own_backends():
    with pytest.raises(DsgenError, match="unknown generation backend 'spark'"):
        Placement("spark").generation_backend()
