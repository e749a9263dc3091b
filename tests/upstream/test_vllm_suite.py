"""vLLM's own workspace tests (0.33.0's and 0.34.0's), from their sdists on PyPI, run against
``interop``.

The only change made to each file is the module's path (``vllm.v1.worker.workspace`` ->
``interop``; see ``tests/support/vllm_sdist.py`` for where the files come from and the offline
switches). Each file's first test, ``test_workspace_lane_count_is_dspark_only``, checks vLLM's
config and GPU worker (how many lanes vLLM asks for), not the workspace: it is deselected here
by name (upstream does not mark it), and the two vLLM modules the file imports for it are
stand-ins that fail if called. Most of the others patch ``workspace.dbo_current_ubatch_id``,
which ``interop`` reads at each request. 0.34.0's file adds six ``get_retained`` cases (the
method 0.34.0 upstreamed) and runs three lane-count cases where 0.33.0's ran four.
"""

import dataclasses
import hashlib
import io
import os
import tarfile

import pytest
from support.vllm_sdist import (
    VLLM_0_33_0,
    VLLM_0_34_0,
    Sdist,
    rewrite_module_path,
    run_upstream_tests,
    sdist_member,
)

TEST_FILE = "tests/v1/worker/test_workspace.py"
DESELECTED = "test_workspace_lane_count_is_dspark_only"


@dataclasses.dataclass(frozen=True)
class Release:
    """A vLLM release's workspace test file: where it comes from and what it holds."""

    sdist: Sdist
    #: Every workspace test of the file, by pytest's name (parametrisations included).
    tests: tuple[str, ...]
    #: How many parametrisations of the lane-count test are deselected.
    deselected: int

    def __str__(self) -> str:
        return self.sdist.name


#: The workspace tests of 0.33.0's file (all but the last patch workspace.dbo_current_ubatch_id).
TESTS_0_33_0 = (
    "test_workspace_lanes_do_not_alias_and_restore_context",
    "test_workspace_lanes_compose_with_ubatches",
    "test_workspace_lock_blocks_growth_and_unlock_restores",
    "test_workspace_lane_validation",
    "test_persistent_resources_are_lazy_and_isolated",
    "test_persistent_resource_lock_applies_to_each_slot",
    "test_persistent_tensor_preserves_contents_and_rejects_changes",
)
RELEASES = (
    Release(VLLM_0_33_0, TESTS_0_33_0, deselected=4),
    Release(
        VLLM_0_34_0,
        (
            *TESTS_0_33_0,  # unchanged
            "test_retained_span_survives_small_scratch_at_the_tail",
            "test_retained_span_reports_disturbance[scratch_overlap]",
            "test_retained_span_reports_disturbance[other_key]",
            "test_retained_span_reports_disturbance[other_size]",
            "test_retained_span_reports_disturbance[reallocation]",
            "test_retained_span_is_per_slot",
        ),
        deselected=3,
    ),
)
CASES = [
    pytest.param(release, name, id=f"{release}-{name}")
    for release in RELEASES
    for name in release.tests
]


@pytest.fixture(scope="module")
def upstream_runs(tmp_path_factory):
    """Each release's file, rewritten, run once under pytest: ``run(release)`` is
    (outcomes by name, output)."""
    runs = {}

    def run(release):
        name = release.sdist.name
        if name not in runs:
            source = sdist_member(release.sdist, TEST_FILE)
            folder = tmp_path_factory.mktemp(name.replace(".", "_"))
            runs[name] = run_upstream_tests(folder, rewrite_module_path(source), (DESELECTED,))
        return runs[name]

    return run


@pytest.mark.parametrize("release", RELEASES, ids=str)
def test_the_run_collects_every_workspace_test_and_deselects_only_the_config_one(
    upstream_runs, release
):
    outcomes, output = upstream_runs(release)
    assert sorted(outcomes) == sorted(release.tests), output
    # the lane-count test's parametrisations, nothing else
    assert f"{len(release.tests)} passed, {release.deselected} deselected" in output, output


@pytest.mark.parametrize(("release", "name"), CASES)
def test_upstream_workspace_test_passes_on_interop(upstream_runs, release, name):
    outcomes, output = upstream_runs(release)
    result = outcomes.get(name)
    assert result is not None, f"{name} did not run:\n{output}"
    assert result.outcome == "passed", f"{name}: {result.outcome}\n{result.detail}"


@pytest.mark.parametrize("release", RELEASES, ids=str)
def test_only_the_module_path_changes(release):
    source = sdist_member(release.sdist, TEST_FILE)
    rewritten = rewrite_module_path(source)
    before, after = source.splitlines(), rewritten.splitlines()
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
    with pytest.raises(pytest.fail.Exception, match=f"expected sha256 {VLLM_0_33_0.sha256}"):
        sdist_member(VLLM_0_33_0, TEST_FILE)


def test_a_cached_member_with_another_sha256_is_not_used(empty_cache):
    cached = empty_cache / VLLM_0_33_0.name / TEST_FILE
    cached.parent.mkdir(parents=True)
    cached.write_text("def test_tampered(): pass\n")
    # It is read from the archive again: here the archive cannot be had, so the call fails.
    with pytest.raises(pytest.fail.Exception, match="could not download"):
        sdist_member(UNREACHABLE, TEST_FILE)


def _fake_sdist(folder, name: str, text: str) -> Sdist:
    """A small sdist ``name`` holding ``TEST_FILE`` with ``text``, written in ``folder``."""
    data = text.encode()
    archive = folder / f"{name}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo(f"{name}/{TEST_FILE}")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return Sdist(
        name=name,
        url=f"http://127.0.0.1:9/{name}.tar.gz",  # never reached: the local copy serves
        sha256=hashlib.sha256(archive.read_bytes()).hexdigest(),
        members={TEST_FILE: hashlib.sha256(data).hexdigest()},
    )


def test_each_release_takes_its_own_local_copy_among_several(empty_cache, monkeypatch):
    copies = empty_cache / "copies"
    copies.mkdir()
    old, new = _fake_sdist(copies, "old", "# old\n"), _fake_sdist(copies, "new", "# new\n")
    paths = [str(copies / "new.tar.gz"), str(copies / "old.tar.gz")]
    monkeypatch.setenv("FUNCTIONAL_WS_VLLM_SDIST", os.pathsep.join(paths))
    assert sdist_member(old, TEST_FILE) == "# old\n"
    assert sdist_member(new, TEST_FILE) == "# new\n"
    monkeypatch.setenv("FUNCTIONAL_WS_VLLM_SDIST", paths[0])  # only the new one
    (empty_cache / "old").rename(empty_cache / "old-extracted")  # forget the cached member
    with pytest.raises(pytest.fail.Exception, match=r"holds no old sdist: expected sha256"):
        sdist_member(old, TEST_FILE)
