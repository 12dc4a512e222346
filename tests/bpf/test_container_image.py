"""The image of deploy/Containerfile, built here with podman from a Debian base made with debootstrap
(no image registry is reachable), run as the DaemonSet runs it — the host's PID namespace, tracefs
read-only, every capability dropped but the six of its manifest — against a workload on the host, with
uprobes attached as perf events (GPUTOP_UPROBE_LINKS=off), as on nodes before Linux 6.6, the path that
needs the manifest's SYS_ADMIN.

Workarounds this VM needs, none of them in the image or the manifests: ``--runtime runc`` (crun
refuses hybrid cgroup hierarchies), ulimits no higher than the caller's hard limits (crun and runc
cannot raise them without CAP_SYS_RESOURCE), the host network, and the host's CA certificates for
pip during the build (HTTPS to the package registry may pass through a proxy with its own CA)."""

from __future__ import annotations

import json
import re
import resource
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from promserver import free_port, http_get, wait_until
from support import ROOT, Workloads

BASE_IMAGE = "localhost/debian:12-slim"     # what `FROM debian:12-slim` resolves to with --pull=never
IMAGE = "localhost/gputop:test"
CACHE = ROOT / ".cache" / "container"


def podman(*args: str, timeout_s: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout_s, check=check)


def debian_mirror() -> str:
    """The Debian mirror of the machine's own apt configuration (deb822 or one-line sources)."""
    for src in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        text = src.read_text()
        for stanza in text.split("\n\n"):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
            if uris and suites and "bookworm" in suites.group(1).split() and "security" not in uris.group(1):
                return uris.group(1)
    for src in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]:
        if src.exists():
            m = re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\s", src.read_text(), re.M)
            if m:
                return m.group(1)
    pytest.skip("no Debian 12 (bookworm) mirror in this machine's apt configuration")


def ulimits() -> list[str]:
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nofile = 1 << 20 if nofile == resource.RLIM_INFINITY else nofile
    nproc = 32768 if nproc == resource.RLIM_INFINITY else min(nproc, 32768)
    return [f"--ulimit=nofile={nofile}:{nofile}", f"--ulimit=nproc={nproc}:{nproc}"]


def pip_conf(path: Path) -> Path:
    """pip's configuration for the build: the host's CA bundle and its http(s) index, if it has one."""
    lines = ["[global]", "cert = /hostca/ca-certificates.crt"]
    res = subprocess.run(["pip3", "config", "list"], capture_output=True, text=True) if shutil.which("pip3") else None
    for line in (res.stdout.splitlines() if res else ()):
        key, _, value = line.partition("=")
        urls = [u for u in value.strip("'").split() if u.startswith(("http://", "https://"))]
        if key in ("global.index-url", "global.extra-index-url") and urls:
            lines.append(f"{key.split('.', 1)[1]} = {' '.join(urls)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def base_image(arch: str = "amd64") -> str:
    """The local Debian 12 base of ``arch``: amd64's is what ``FROM debian:12-slim`` resolves to; another
    architecture's has a tag of its own and replaces the FROM with ``podman build --from``."""
    return BASE_IMAGE if arch == "amd64" else f"{BASE_IMAGE}-{arch}"


def image_name(arch: str = "amd64") -> str:
    return IMAGE if arch == "amd64" else f"{IMAGE}-{arch}"


def build_image(tmp: Path, arch: str = "amd64") -> subprocess.CompletedProcess[str]:
    """The Debian base (once) and the image of deploy/Containerfile, from podman's layer cache when
    nothing changed: ./test.sh builds it beside the unit tests (``python tests/bpf/test_container_image.py
    build``), so that the BPF tier finds it built. ``arch`` other than amd64 (arm64): debootstrap's
    ``--arch`` (its second stage through qemu-user-static and binfmt_misc), the base imported with that
    architecture in its metadata, and the image built with ``--platform linux/ARCH`` under emulation
    (tests/bpf/test_container_image_arm64.py); amd64's commands are unchanged."""
    foreign = arch != "amd64"
    base = base_image(arch)
    if podman("image", "exists", base, check=False).returncode != 0:
        rootfs = CACHE / (f"rootfs-{arch}" if foreign else "rootfs")
        shutil.rmtree(rootfs, ignore_errors=True)
        rootfs.mkdir(parents=True)
        subprocess.run(["debootstrap", *([f"--arch={arch}"] if foreign else []), "--variant=minbase", "bookworm",
                        str(rootfs), debian_mirror()],
                       check=True, capture_output=True, timeout=3600 if foreign else 900)
        shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        for src in Path("/etc/apt/sources.list.d").glob("*.sources"):
            shutil.copy(src, rootfs / "etc" / "apt" / "sources.list.d" / src.name)
        if any((rootfs / "etc" / "apt" / "sources.list.d").glob("*.sources")):
            (rootfs / "etc" / "apt" / "sources.list").unlink(missing_ok=True)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(["podman", "import", *(["--arch", arch, "--os", "linux"] if foreign else []),
                        "--change", 'CMD ["bash"]', "-", base], stdin=tar.stdout,
                       check=True, capture_output=True, timeout=600)
        assert tar.wait() == 0
        shutil.rmtree(rootfs)
    platform = ["--platform", f"linux/{arch}", "--from", base] if foreign else []
    build = podman("build", "--pull=never", *platform, "--runtime=runc", "--network=host", *ulimits(),
                   "-v", "/etc/ssl/certs:/hostca:ro", "-v", f"{pip_conf(tmp / 'pip.conf')}:/etc/pip.conf:ro",
                   "-f", str(ROOT / "deploy" / "Containerfile"), "-t", image_name(arch), str(ROOT),
                   timeout_s=5400 if foreign else 1500, check=False)
    return build


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    for tool in ("podman", "runc", "debootstrap"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (scripts/setup.sh --test installs it)")
    build = build_image(tmp_path_factory.mktemp("image"))
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    yield IMAGE
    podman("rmi", "-f", IMAGE, check=False)        # about 1 GB; the Debian base stays for the next run


def daemonset_caps() -> list[str]:
    import yaml

    manifest = ROOT / "deploy" / "kubernetes" / "gputop-exporter.yaml"
    ds = next(d for d in yaml.safe_load_all(manifest.read_text()) if d["kind"] == "DaemonSet")
    caps: list[str] = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]["add"]
    return caps


def test_the_image_traces_a_host_workload_as_the_daemonset_runs_it(image: str, workloads: Workloads,
                                                                   tmp_path: Path) -> None:
    port = free_port()
    name = f"gputop-test-{uuid.uuid4().hex[:8]}"
    run = podman("run", "-d", "--name", name, "--runtime=runc", *ulimits(), "--pid=host", "--network=host",
                 "--cap-drop=ALL", *(f"--cap-add={c}" for c in daemonset_caps()),
                 "--security-opt=seccomp=unconfined", "--read-only", "--tmpfs=/tmp", "--tmpfs=/var/cache",
                 "-e", "XDG_CACHE_HOME=/var/cache", "-e", "GPUTOP_NODE=node-under-test",
                 "-e", "GPUTOP_UPROBE_LINKS=off",
                 "-v", "/sys/kernel/tracing:/sys/kernel/tracing:ro",
                 image, "--listen", f"127.0.0.1:{port}", "--bpf", "--no-nvml", "-d", "0.5", check=False)
    assert run.returncode == 0, run.stderr
    wl = None
    try:
        def ready() -> bool:
            state = json.loads(podman("inspect", name).stdout)[0]["State"]
            assert state["Running"], podman("logs", name).stderr
            code, body = http_get(f"http://127.0.0.1:{port}/healthz")
            return code == 200 and json.loads(body)["sources"]["bpf"]["status"] == "ok"
        wait_until("the container's exporter", ready, 120, 0.5)
        go = tmp_path / "go"
        wl = subprocess.Popen([str(workloads.dynamic), "--wait", str(go), "launch:6000:40,2,1:128,1,1:0",
                               "sleep:30000"], stdout=subprocess.PIPE)
        assert wl.stdout is not None
        pid = int(wl.stdout.readline().split()[1])
        time.sleep(1.5)                     # the exec event attaches the container's exporter
        go.touch()
        line = f'gputop_kernel_launches_total{{comm="wl_dynamic",container="",pid="{pid}"}} 6000.0'
        wait_until("the host workload's launches in the container's metrics",
                   lambda: line in http_get(f"http://127.0.0.1:{port}/metrics")[1], 30, 0.5)
        metrics = http_get(f"http://127.0.0.1:{port}/metrics")[1]
        assert 'gputop_build_info{node="node-under-test",version="0.1.0"} 1.0' in metrics
    finally:
        if wl is not None:
            wl.kill()
            wl.wait()
        podman("stop", "--time=60", name, timeout_s=120, check=False)       # SIGTERM: probes detached
        state = json.loads(podman("inspect", name).stdout)[0]["State"]
        logs = podman("logs", name, check=False).stderr
        podman("rm", "-f", name, check=False)
    assert state["ExitCode"] == 0, logs
    assert "Traceback" not in logs


if __name__ == "__main__":     # `build`: the image ahead of its test (./test.sh); a failure is left to the test
    import sys
    import tempfile

    if sys.argv[1:] == ["build"] and all(shutil.which(t) for t in ("podman", "runc", "debootstrap")):
        with tempfile.TemporaryDirectory() as d:
            sys.exit(build_image(Path(d)).returncode)
