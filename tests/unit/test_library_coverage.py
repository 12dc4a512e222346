"""What each driver branch and CUDA runtime of the test bed offers, read from the real libraries'
symbols (gputop.sources.bpf.attach.catalogue.coverage, as `gputop doctor` names it), against the support matrix
pinned in tests/support_matrix.py (docs/support.md); the driver's version read from the file."""

from __future__ import annotations

import os

import pytest
import support_matrix as sm
from support_matrix import DriverBranch

from gputop.sources.bpf.attach import catalogue
from gputop.sources.bpf.attach.symbols import read_symbols
from gputop.sources.cudalibs import driver_version, library_line


def _first(features: tuple[catalogue.Feature, ...]) -> frozenset[str]:
    return frozenset(f.symbols[0] for f in features)


def _need(path: os.PathLike[str] | str) -> None:
    if not os.path.exists(path):
        pytest.skip(f"{path} is not in the test bed (scripts/testbed.sh fetches it; Debian only for drivers)")


@pytest.fixture(params=sm.BRANCHES)
def branch(request: pytest.FixtureRequest) -> DriverBranch:
    b = sm.driver_branch(request.param)
    _need(b.libcuda)
    return b


def test_each_driver_branch_offers_what_the_matrix_says(branch: DriverBranch) -> None:
    syms = read_symbols(str(branch.libcuda))
    assert syms is not None
    cov = catalogue.coverage(syms.functions)
    assert cov is not None and cov.layer == "driver"
    assert _first(cov.absent) == sm.DRIVER_ABSENT[branch.branch]
    assert _first(cov.uncounted) == sm.DRIVER_UNCOUNTED[branch.branch]
    counted = [f for f in catalogue.FEATURES if f.layer == "driver" and f.counted]
    assert len(cov.present) + len(cov.absent) == len(counted) == 20
    # an absent family is not probed: no probe of the object names one of its symbols
    probed = {p.symbol for p, _addr in catalogue.probes_for(syms.functions)}
    assert not probed & {s for f in cov.absent for s in f.symbols}
    assert "cuLaunchKernel" in probed and not syms.driver_layer
    assert all(probed & set(f.symbols) for f in cov.present)     # what it has, gputop probes


@pytest.mark.parametrize("minor", sm.RUNTIMES)
def test_each_runtime_offers_what_the_matrix_says(minor: str) -> None:
    rt = sm.cuda_runtime(minor)
    _need(rt.lib)
    syms = read_symbols(str(rt.lib))
    assert syms is not None
    cov = catalogue.coverage(syms.functions)
    assert cov is not None and cov.layer == "runtime"
    assert _first(cov.absent) == sm.RUNTIME_ABSENT[minor]
    assert _first(cov.uncounted) == sm.RUNTIME_UNCOUNTED[minor]
    probed = {p.symbol for p, _addr in catalogue.probes_for(syms.functions)}
    assert not probed & {s for f in cov.absent for s in f.symbols}
    # what it has, gputop probes (cudaMemcpyWithAttributesAsync of 13.2+ was not, before)
    assert [f.name for f in cov.present if not probed & set(f.symbols)] == []
    # CUDA 13's cudaMemPrefetchAsync takes a location, 12's a device: chosen by the symbols beside it
    handler = {p.symbol: p.entry for p, _addr in catalogue.probes_for(syms.functions)}
    assert handler["cudaMemPrefetchAsync"] == ("rt_prefetch_loc" if rt.major >= 13 else "rt_prefetch_dev")
    assert handler.get("cudaGraphAddNode") == (None if minor in ("12.0", "12.1") else
                                               "graph_add_node6" if rt.major >= 13 else "graph_add_node5")


def test_doctor_names_each_branch_s_version_and_what_it_lacks(branch: DriverBranch) -> None:
    fd = os.open(branch.libcuda, os.O_RDONLY)
    try:
        assert driver_version(fd) == branch.version          # read from the file, not its name (libcuda.so.1)
        syms = read_symbols(str(branch.libcuda))
        assert syms is not None
        line = library_line(fd, str(branch.libcuda), syms.functions)
    finally:
        os.close(fd)
    assert line is not None and line.startswith(f"libcuda.so.1 (driver {branch.version}): ")
    present = 20 - len(sm.DRIVER_ABSENT[branch.branch])
    assert f"{present} of 20 families probed" in line
    if branch.branch == "470":
        assert "absent here, not probed: launches with attributes (cuLaunchKernelEx), " in line


def test_a_driver_without_the_version_in_its_text_is_named_by_its_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    lib = tmp_path / "libcuda.so.999.12.34"
    lib.write_bytes(b"\x7fELF no profile path here")
    fd = os.open(lib, os.O_RDONLY)
    try:
        assert driver_version(fd, str(lib)) == "999.12.34"
        assert driver_version(fd, str(tmp_path / "libcuda.so.1")) is None     # unknown, never guessed
    finally:
        os.close(fd)


def test_objects_that_are_no_runtime_or_driver_have_no_coverage() -> None:
    assert catalogue.coverage({"cuLaunchKernel": 1, "cuMemcpyHtoD_v2": 2}) is None     # a layer (no cudbg*)
    assert catalogue.coverage({"cudaLaunchKernel": 1}) is None                        # a wrapper


@pytest.mark.parametrize("layer", ["driver", "runtime"])
def test_support_doc_shows_the_matrix_the_tests_pin(layer: str) -> None:
    """docs/support.md's tables are the ones tests/support_matrix.py renders from the catalogue and the
    pinned matrix: a family added to the catalogue, or a library whose offer changed, changes the doc."""
    doc = (sm.ROOT / "docs" / "support.md").read_text()
    assert sm.render_table(layer) in doc


def test_a_toolkit_runtime_is_named_by_its_file_s_version(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A toolkit installs libcudart.so.12.4.127 (libcudart.so.12 links to it); a wheel's copy has no version
    in its name, and none is guessed."""
    rt = sm.cuda_runtime("12.4")
    _need(rt.lib)
    lib = tmp_path / "libcudart.so.12.4.127"
    lib.write_bytes(rt.lib.read_bytes())
    (tmp_path / "libcudart.so.12").symlink_to(lib.name)
    syms = read_symbols(str(lib))
    assert syms is not None
    fd = os.open(lib, os.O_RDONLY)
    try:
        named = library_line(fd, str(tmp_path / "libcudart.so.12"), syms.functions)
        unnamed = library_line(fd, str(rt.lib), syms.functions)
    finally:
        os.close(fd)
    assert named is not None and named.startswith("libcudart.so.12 (CUDA runtime 12.4.127): 14 of 18 families probed")
    assert unnamed is not None and unnamed.startswith("libcudart.so.12 (CUDA runtime): 14 of 18 families probed")
