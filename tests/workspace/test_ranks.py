"""Ranks as vLLM runs them: one process per device, each with its own process-wide manager,
passing workspace views to collectives (``tests/support/ranks.py`` is one rank).

Two gloo processes on the CPU each reserve the worst case, lock, and run steps of different
sizes with ``all_reduce`` and ``all_to_all_single`` in place on views of their locked
workspace; the bytes each rank read are checked against what every rank wrote, and the
views must have stayed in the one locked buffer (no growth, no new buffer).
"""

import pytest
from support.ranks import STEPS, expected_hidden, expected_received, run_ranks

WORLD = 2


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return run_ranks(WORLD, tmp_path_factory.mktemp("ranks"))


@pytest.mark.parametrize("rank", range(WORLD))
def test_collectives_in_place_on_workspace_views_give_every_rank_the_right_bytes(reports, rank):
    for step, (tokens, seen) in enumerate(zip(STEPS, reports[rank]["steps"], strict=True)):
        assert seen["hidden"] == expected_hidden(WORLD, step, tokens), f"step {step}"
        assert seen["received"] == expected_received(rank, WORLD, step, tokens), f"step {step}"


@pytest.mark.parametrize("rank", range(WORLD))
def test_the_views_stay_in_the_locked_workspace(reports, rank):
    report = reports[rank]
    assert report["locked"] and report["same_buffer"]
    assert report["growths"] == [1]  # the reservation; no step grew the slot
    for step in report["steps"]:
        offsets, ends = step["offsets"], step["ends"]
        assert offsets[0] == 0 and ends[-1] <= report["capacity"]  # inside, from the start
        assert all(e <= o for e, o in zip(ends, offsets[1:], strict=False))  # no overlap


@pytest.mark.parametrize("rank", range(WORLD))
def test_jax_in_the_rank_process_reads_the_reduced_bytes_in_place(reports, rank):
    for step in reports[rank]["steps"]:
        assert step["jax_aliases"]
        assert step["jax_hidden"] == step["hidden"]


def test_a_rank_that_dies_stops_the_run_at_once_and_says_which(tmp_path):
    # Rank 0 would wait for rank 1 in the group's rendezvous; it is killed, not waited for.
    with pytest.raises(AssertionError, match=r"rank 1 \(exit 3\)"):
        run_ranks(WORLD, tmp_path, timeout=60, env={"RANKS_TEST_FAIL": "1"})
