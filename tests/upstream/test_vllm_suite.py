"""vLLM 0.33.0's own workspace tests, from its sdist on PyPI, run against ``interop``.

The only change made to the file is the module's path (``vllm.v1.worker.workspace`` ->
``interop``; see ``tests/support/vllm_sdist.py`` for where the file comes from and the offline
switches). Its first test, ``test_workspace_lane_count_is_dspark_only``, checks vLLM's
config and GPU worker (how many lanes vLLM asks for), not the workspace: it is deselected,
and the two vLLM modules the file imports for it are stand-ins that fail if called. Six of
them patch ``workspace.dbo_current_ubatch_id``, which ``interop`` reads at each request.
"""

import dataclasses

import pytest
from support.vllm_sdist import VLLM_0_33_0, rewrite_module_path, run_upstream_tests, sdist_member

TEST_FILE = "tests/v1/worker/test_workspace.py"
DESELECTED = "test_workspace_lane_count_is_dspark_only"
#: Every workspace test of the file (all but the last patch workspace.dbo_current_ubatch_id).
UPSTREAM_TESTS = (
    "test_workspace_lanes_do_not_alias_and_restore_context",
    "test_workspace_lanes_compose_with_ubatches",
    "test_workspace_lock_blocks_growth_and_unlock_restores",
    "test_workspace_lane_validation",
    "test_persistent_resources_are_lazy_and_isolated",
    "test_persistent_resource_lock_applies_to_each_slot",
    "test_persistent_tensor_preserves_contents_and_rejects_changes",
)


@pytest.fixture(scope="module")
def upstream_source():
    return sdist_member(VLLM_0_33_0, TEST_FILE)


@pytest.fixture(scope="module")
def upstream_run(upstream_source, tmp_path_factory):
    """The upstream file, rewritten, run once under pytest: (outcomes by name, output)."""
    folder = tmp_path_factory.mktemp("vllm_0_33_0")
    return run_upstream_tests(folder, rewrite_module_path(upstream_source), (DESELECTED,))


def test_the_run_collects_every_workspace_test_and_deselects_only_the_config_one(upstream_run):
    outcomes, output = upstream_run
    assert sorted(outcomes) == sorted(UPSTREAM_TESTS), output
    assert "4 deselected" in output, output  # its four parametrisations, nothing else


@pytest.mark.parametrize("name", UPSTREAM_TESTS)
def test_upstream_workspace_test_passes_on_interop(upstream_run, name):
    outcomes, output = upstream_run
    result = outcomes.get(name)
    assert result is not None, f"{name} did not run:\n{output}"
    assert result.outcome == "passed", f"{name}: {result.outcome}\n{result.detail}"


def test_only_the_module_path_changes(upstream_source):
    rewritten = rewrite_module_path(upstream_source)
    before, after = upstream_source.splitlines(), rewritten.splitlines()
    assert len(before) == len(after)
    changed = [(old, new) for old, new in zip(before, after, strict=True) if old != new]
    assert changed == [(f"import {VLLM} as workspace", "import interop as workspace")]


VLLM = "vllm.v1.worker.workspace"
REWRITES = {
    "import-as": (f"import {VLLM} as ws", "import interop as ws"),
    "from-import": (f"from {VLLM} import WorkspaceManager", "from interop import WorkspaceManager"),
    "patch-target": (f'patch("{VLLM}._manager", m)', 'patch("interop._manager", m)'),
    "from-package": ("    from vllm.v1.worker import workspace", "    import interop as workspace"),
    "word-boundary": (f"import {VLLM}_extra, {VLLM}", f"import {VLLM}_extra, interop"),
}  # fmt: skip


@pytest.mark.parametrize(("line", "expected"), REWRITES.values(), ids=REWRITES)
def test_rewrite_module_path(line, expected):
    assert rewrite_module_path(line) == expected


def test_rewrite_refuses_a_file_that_never_names_the_module():
    with pytest.raises(ValueError, match="never names"):
        rewrite_module_path("from vllm.v1.worker.gpu_worker import _num_workspace_lanes")


# ----- where the file comes from: the sdist's checks and the offline switches -----

#: The release, as if PyPI could not be reached (a port nothing listens on).
UNREACHABLE = dataclasses.replace(VLLM_0_33_0, url="http://127.0.0.1:9/vllm-0.33.0.tar.gz")


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUNCTIONAL_WS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FUNCTIONAL_WS_VLLM_SDIST", raising=False)
    monkeypatch.delenv("FUNCTIONAL_WS_OFFLINE", raising=False)
    return tmp_path


def test_a_failed_download_fails_and_says_what_to_do(empty_cache):
    with pytest.raises(pytest.fail.Exception) as info:
        sdist_member(UNREACHABLE, TEST_FILE)
    message = str(info.value)
    assert UNREACHABLE.url in message
    assert "FUNCTIONAL_WS_VLLM_SDIST" in message and "FUNCTIONAL_WS_OFFLINE=1" in message


def test_offline_says_so_and_skips(empty_cache, monkeypatch):
    monkeypatch.setenv("FUNCTIONAL_WS_OFFLINE", "1")
    with pytest.raises(pytest.skip.Exception, match="FUNCTIONAL_WS_OFFLINE=1"):
        sdist_member(UNREACHABLE, TEST_FILE)


def test_a_local_copy_with_another_sha256_fails(empty_cache, monkeypatch):
    fake = empty_cache / "elsewhere.tar.gz"
    fake.write_bytes(b"not the release")
    monkeypatch.setenv("FUNCTIONAL_WS_VLLM_SDIST", str(fake))
    with pytest.raises(pytest.fail.Exception, match=f"expected {VLLM_0_33_0.sha256}"):
        sdist_member(VLLM_0_33_0, TEST_FILE)


def test_a_cached_member_with_another_sha256_is_not_used(empty_cache):
    cached = empty_cache / VLLM_0_33_0.name / TEST_FILE
    cached.parent.mkdir(parents=True)
    cached.write_text("def test_tampered(): pass\n")
    # It is read from the archive again: here the archive cannot be had, so the call fails.
    with pytest.raises(pytest.fail.Exception, match="could not download"):
        sdist_member(UNREACHABLE, TEST_FILE)
