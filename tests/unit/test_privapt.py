"""scripts/privapt.py without the network: reading the machine's apt sources (Debian and Ubuntu, deb822
and one-line), choosing the host's own release, the private sources it writes, the NVIDIA package
choice on Ubuntu, and the lists apt prints. Host names are placeholders (mirror.example)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import privapt
from privapt import Deb, Release, Source

BOOKWORM = Release("debian", ("bookworm",), "Debian GNU/Linux 12 (bookworm)")
NOBLE = Release("ubuntu", ("noble",), "Ubuntu 24.04 LTS")
JAMMY = Release("ubuntu", ("jammy",), "Ubuntu 22.04 LTS")
DEB_KEY = "/usr/share/keyrings/debian-archive-keyring.gpg"
UBU_KEY = "/usr/share/keyrings/ubuntu-archive-keyring.gpg"

DEBIAN_SOURCES = f"""\
Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: {DEB_KEY}

Types: deb deb-src
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main contrib
Signed-By: {DEB_KEY}

Types: deb
URIs: http://mirror.example/debian
Suites: bookworm-backports
Components: main
Signed-By: {DEB_KEY}

Types: deb
URIs: http://old.example/debian
Suites: bookworm
Components: main
Enabled: no
"""

NOBLE_SOURCES = f"""\
## Ubuntu's own file, as the installer writes it
Types: deb
URIs: http://mirror.example/ubuntu/
Suites: noble noble-updates noble-backports
Components: main restricted universe multiverse
Signed-By: {UBU_KEY}

Types: deb
URIs: http://security.example/ubuntu/
Suites: noble-security
Components: main restricted universe multiverse
Signed-By: {UBU_KEY}
"""

JAMMY_LIST = f"""\
# See http://help.example/community/UpgradeNotes for how to upgrade to
# newer versions of the distribution.
deb http://mirror.example/ubuntu/ jammy main restricted
# deb-src http://mirror.example/ubuntu/ jammy main restricted
deb http://mirror.example/ubuntu/ jammy-updates main restricted
deb http://mirror.example/ubuntu/ jammy universe
deb [arch=amd64,i386 signed-by={UBU_KEY}] http://mirror.example/ubuntu/ jammy-security main  # fixes
# deb http://mirror.example/ubuntu/ jammy-proposed main
deb http://mirror.example/ubuntu/ jammy-backports main restricted universe multiverse
deb cdrom:[Ubuntu 22.04 LTS _Jammy Jellyfish_]/ jammy main restricted
deb file:/srv/local-mirror jammy main
deb [trusted=yes] file:/srv/flat ./
"""


def test_deb822_debian_keeps_enabled_binary_entries_with_their_keyring() -> None:
    got = privapt.parse_deb822(DEBIAN_SOURCES, "debian.sources")
    assert [(s.type, s.uri, s.suite, s.components) for s in got] == [
        ("deb", "http://mirror.example/debian", "bookworm", ("main",)),
        ("deb", "http://mirror.example/debian", "bookworm-updates", ("main",)),
        ("deb", "http://mirror.example/debian-security", "bookworm-security", ("main", "contrib")),
        ("deb-src", "http://mirror.example/debian-security", "bookworm-security", ("main", "contrib")),
        ("deb", "http://mirror.example/debian", "bookworm-backports", ("main",)),
    ]                                                       # Enabled: no is gone, the comment line too
    assert {s.option("signed-by") for s in got} == {DEB_KEY}
    assert all(s.origin == "debian.sources" for s in got)


def test_own_release_is_the_codename_and_its_updates_and_security_pockets() -> None:
    own = privapt.own_release(privapt.parse_deb822(DEBIAN_SOURCES), BOOKWORM)
    assert [(s.uri, s.suite) for s in own] == [
        ("http://mirror.example/debian", "bookworm"),
        ("http://mirror.example/debian", "bookworm-updates"),
        ("http://mirror.example/debian-security", "bookworm-security"),
    ]                                                       # no deb-src, no backports
    only = privapt.own_release(privapt.parse_deb822(DEBIAN_SOURCES), BOOKWORM, privapt.RELEASE_ONLY)
    assert [(s.uri, s.suite) for s in only] == [("http://mirror.example/debian", "bookworm")]


def test_noble_deb822_ubuntu_sources() -> None:
    own = privapt.own_release(privapt.parse_deb822(NOBLE_SOURCES, "ubuntu.sources"), NOBLE)
    assert [(s.uri, s.suite) for s in own] == [
        ("http://mirror.example/ubuntu/", "noble"),
        ("http://mirror.example/ubuntu/", "noble-updates"),
        ("http://security.example/ubuntu/", "noble-security"),
    ]
    assert own[0].components == ("main", "restricted", "universe", "multiverse")
    assert own[0].options == (("Signed-By", UBU_KEY),)
    # restricted is there already: adding it changes nothing
    assert privapt.with_component(own, privapt.nvidia_component(NOBLE)) == own


def test_jammy_one_line_comments_options_cdrom_and_file_entries() -> None:
    got = privapt.parse_one_line(JAMMY_LIST, "sources.list")
    assert [(s.type, s.uri, s.suite, s.components) for s in got] == [
        ("deb", "http://mirror.example/ubuntu/", "jammy", ("main", "restricted")),
        ("deb", "http://mirror.example/ubuntu/", "jammy-updates", ("main", "restricted")),
        ("deb", "http://mirror.example/ubuntu/", "jammy", ("universe",)),
        ("deb", "http://mirror.example/ubuntu/", "jammy-security", ("main",)),
        ("deb", "http://mirror.example/ubuntu/", "jammy-backports", ("main", "restricted", "universe", "multiverse")),
        ("deb", "cdrom:[Ubuntu 22.04 LTS _Jammy Jellyfish_]/", "jammy", ("main", "restricted")),
        ("deb", "file:/srv/local-mirror", "jammy", ("main",)),
        ("deb", "file:/srv/flat", "./", ()),
    ]
    assert got[3].options == (("Architectures", "amd64 i386"), ("Signed-By", UBU_KEY))
    assert got[7].options == (("Trusted", "yes"),)
    own = privapt.own_release(got, JAMMY)
    # one entry per (uri, suite, options): main restricted + universe merge; the CD-ROM (a private
    # state cannot mount it) and the flat repository are left out; the local file mirror is kept
    assert [(s.uri, s.suite, s.components) for s in own] == [
        ("http://mirror.example/ubuntu/", "jammy", ("main", "restricted", "universe")),
        ("http://mirror.example/ubuntu/", "jammy-updates", ("main", "restricted")),
        ("http://mirror.example/ubuntu/", "jammy-security", ("main",)),
        ("file:/srv/local-mirror", "jammy", ("main",)),
    ]
    assert privapt.own_release(privapt.parse_one_line("deb cdrom:[Debian]/ bookworm main\n"), BOOKWORM) == []


def test_one_line_add_and_remove_options() -> None:
    (s,) = privapt.parse_one_line(
        "deb [ arch+=arm64 lang-=de signed-by=/k1.gpg,/k2.gpg ] http://m.example/d bookworm main")
    assert s.options == (("Architectures-Add", "arm64"), ("Languages-Remove", "de"), ("Signed-By", "/k1.gpg /k2.gpg"))


def test_third_party_repositories_of_other_suites_are_left_out(tmp_path: Path) -> None:
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "sources.list").write_text("deb http://mirror.example/debian bookworm main\n")
    (etc / "sources.list.d" / "nodesource.sources").write_text(
        "Types: deb\nURIs: https://node.example/node_20.x\nSuites: nodistro\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/nodesource.gpg\n")
    (etc / "sources.list.d" / "cloud-sdk.list").write_text("deb https://cloud.example/apt cloud-sdk-bookworm main\n")
    (etc / "sources.list.d" / "docker.list").write_text(
        "deb [arch=amd64] https://docker.example/linux/debian bookworm stable\n")
    # files apt itself ignores: disabled, saved copies
    (etc / "sources.list.d" / "extra.list.disabled-by-farm").write_text("deb http://x.example/d bookworm main\n")
    (etc / "sources.list.d" / "old.list.save").write_text("deb http://y.example/d bookworm main\n")
    files = [p.name for p in privapt.source_files(etc)]
    assert files == ["sources.list", "cloud-sdk.list", "docker.list", "nodesource.sources"]
    own = privapt.own_release(privapt.read_sources(etc), BOOKWORM)
    # docker's repository names the codename as its suite: it is of this release and kept (its own
    # component "stable" holds no NVIDIA or bcc package, so it costs one index)
    assert [(s.uri, s.suite, s.components) for s in own] == [
        ("http://mirror.example/debian", "bookworm", ("main",)),
        ("https://docker.example/linux/debian", "bookworm", ("stable",)),
    ]


def test_inline_signed_by_key_survives_into_the_private_sources() -> None:
    text = ("Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main\n"
            "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mDMEZ\n -----END PGP PUBLIC KEY BLOCK-----\n")
    own = privapt.with_component(privapt.own_release(privapt.parse_deb822(text), BOOKWORM), "non-free")
    out = privapt.render_deb822(own)
    assert out == ("Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main non-free\n"
                   "Signed-By: \n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mDMEZ\n"
                   " -----END PGP PUBLIC KEY BLOCK-----\n")
    assert privapt.parse_deb822(out) == [Source("deb", "http://mirror.example/debian", "bookworm",
                                                ("main", "non-free"), own[0].options)]


def test_render_round_trips_through_the_parser() -> None:
    own = privapt.with_component(privapt.own_release(privapt.parse_deb822(DEBIAN_SOURCES), BOOKWORM), "non-free")
    back = privapt.parse_deb822(privapt.render_deb822(own))
    assert back == own
    assert [s.components for s in back] == [("main", "non-free"), ("main", "non-free"), ("main", "contrib", "non-free")]


def test_os_release_family_and_codenames() -> None:
    deb = privapt.parse_os_release(
        'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_CODENAME=bookworm\n')
    assert deb == BOOKWORM
    ubu = privapt.parse_os_release('PRETTY_NAME="Ubuntu 24.04 LTS"\nID=ubuntu\nID_LIKE=debian\n'
                                   'VERSION_CODENAME=noble\nUBUNTU_CODENAME=noble\n')
    assert ubu == NOBLE
    mint = privapt.parse_os_release('NAME="Linux Mint"\nID=linuxmint\nID_LIKE="ubuntu debian"\n'
                                    'VERSION_CODENAME=wilma\nUBUNTU_CODENAME=noble\n')
    assert (mint.family, mint.codenames) == ("ubuntu", ("wilma", "noble"))
    assert privapt.nvidia_component(deb) == "non-free" and privapt.nvidia_component(ubu) == "restricted"
    with pytest.raises(privapt.PrivAptError, match="neither Debian nor Ubuntu"):
        privapt.parse_os_release('PRETTY_NAME="Fedora Linux 40"\nID=fedora\nVERSION_CODENAME=""\n')
    with pytest.raises(privapt.PrivAptError, match="no release codename"):
        privapt.parse_os_release('PRETTY_NAME="Debian GNU/Linux trixie/sid"\nID=debian\n')


def test_machine_apt_without_an_own_release_source_says_so(tmp_path: Path) -> None:
    (tmp_path / "sources.list").write_text("deb http://mirror.example/debian bullseye main\n")
    osr = tmp_path / "os-release"
    osr.write_text("ID=debian\nVERSION_CODENAME=bookworm\nPRETTY_NAME=\"Debian 12\"\n")
    with pytest.raises(privapt.PrivAptError, match=r"no enabled apt source of Debian 12 \(bookworm\)"):
        privapt.machine_apt(tmp_path / "state", etc=tmp_path, os_release=osr)
    (tmp_path / "sources.list").write_text("deb http://mirror.example/debian bookworm main\n")
    apt, release = privapt.machine_apt(tmp_path / "state", nvidia=True, etc=tmp_path, os_release=osr)
    assert release.family == "debian" and apt.sources[0].components == ("main", "non-free")
    apt.prepare()
    state = tmp_path / "state"
    assert (state / "sources.list").read_text() == "" and (state / "status").read_text() == ""
    assert (state / "sources.list.d" / "gputop.sources").read_text() == (
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\nComponents: main non-free\n")
    opts = apt.options()
    assert f"Dir::State::Lists={state / 'lists'}" in opts and f"Dir::State::status={state / 'status'}" in opts


def test_machine_apt_leaves_the_machine_s_lists_alone(tmp_path: Path) -> None:
    """apt-config sees the private paths: nothing points at /var/lib/apt/lists or the dpkg status."""
    (tmp_path / "sources.list").write_text("deb http://mirror.example/debian bookworm main\n")
    osr = tmp_path / "os-release"
    osr.write_text("ID=debian\nVERSION_CODENAME=bookworm\n")
    apt, _ = privapt.machine_apt(tmp_path / "state", etc=tmp_path, os_release=osr)
    if subprocess.run(["which", "apt-config"], capture_output=True).returncode != 0:
        pytest.skip("apt-config is not installed (not a Debian or Ubuntu machine)")
    dump = subprocess.run(["apt-config", *apt.options(), "shell", "L", "Dir::State::Lists/d",
                           "S", "Dir::State::status/f", "P", "Dir::Etc::SourceParts/d"],
                          capture_output=True, text=True, check=True).stdout
    assert dump == (f"L='{tmp_path}/state/lists/'\nS='{tmp_path}/state/status'\n"
                    f"P='{tmp_path}/state/sources.list.d/'\n")


def test_ubuntu_compute_package_is_the_newest_non_server() -> None:
    # what `apt-cache search --names-only '^libnvidia-compute-[0-9]+(-server)?$'` gives on noble (names only)
    names = ["libnvidia-compute-470", "libnvidia-compute-470-server", "libnvidia-compute-535",
             "libnvidia-compute-535-server", "libnvidia-compute-550", "libnvidia-compute-570-server",
             "libnvidia-compute-575-server", "libnvidia-compute-565"]
    assert privapt.ubuntu_compute_package(names) == "libnvidia-compute-565"
    assert privapt.ubuntu_compute_package(["libnvidia-compute-90", *names]) == "libnvidia-compute-565"  # not by text
    only_server = ["libnvidia-compute-535-server", "libnvidia-compute-570-server", "libnvidia-compute-550-server"]
    assert privapt.ubuntu_compute_package(only_server) == "libnvidia-compute-570-server"
    assert privapt.ubuntu_compute_package(
        ["libnvidia-compute-tools", "libnvidia-compute", "nvidia-compute-utils-550"]) is None
    assert privapt.ubuntu_compute_package([]) is None


LLVM_URI = "http://mirror.example/debian/pool/main/l/llvm-toolchain-14/libllvm14_14.0.6-12_amd64.deb"
LLVM_SHA = "SHA256:cd986403cfe53f47c41b80667f6b344c40fe35de4c5081dad9358b4c77cf64a8"
SSL_URI = "http://mirror.example/debian-security/pool/updates/main/o/openssl/libssl3_3.0.22-1%7edeb12u2_amd64.deb"
BPFCC_URI = "http://mirror.example/debian/pool/main/b/bpfcc/python3-bpfcc_0.26.0%2bds-1_all.deb"
PRINT_URIS = (f"'{LLVM_URI}' libllvm14_1%3a14.0.6-12_amd64.deb 21840232 {LLVM_SHA}\n"
              f"'{BPFCC_URI}' python3-bpfcc_0.26.0+ds-1_all.deb 44104 MD5Sum:a21ef0977e6ab1d1713cb5842d256dda\n"
              f"'{SSL_URI}' libssl3_3.0.22-1~deb12u2_amd64.deb 2039888 \n")


def test_print_uris_lines() -> None:
    assert privapt.parse_print_uris(PRINT_URIS) == [
        Deb("libllvm14", "1:14.0.6-12", "amd64", "libllvm14_1%3a14.0.6-12_amd64.deb", 21840232, LLVM_URI, LLVM_SHA),
        Deb("python3-bpfcc", "0.26.0+ds-1", "all", "python3-bpfcc_0.26.0+ds-1_all.deb", 44104, BPFCC_URI,
            "MD5Sum:a21ef0977e6ab1d1713cb5842d256dda"),
        Deb("libssl3", "3.0.22-1~deb12u2", "amd64", "libssl3_3.0.22-1~deb12u2_amd64.deb", 2039888, SSL_URI, ""),
    ]                                       # the security archive's lines carry no hash


def test_base_is_essential_and_required_and_apt() -> None:
    avail = ("Package: libc6\nPriority: optional\nVersion: 2.36\n\n"
             "Package: dpkg\nEssential: yes\nPriority: required\n\n"
             "Package: mawk\nPriority: required\n\nPackage: python3-bpfcc\nPriority: optional\n"
             "Description: Python 3 wrappers\n BPF Compiler Collection\n")
    assert privapt.parse_base(avail) == ["apt", "dpkg", "mawk"]


def test_headers_only_keeps_the_header_packages_of_a_meta_closure() -> None:
    def deb(name: str) -> Deb:
        return Deb(name, "1", "amd64", f"{name}_1_amd64.deb", 1, "u", "")
    closure = [deb(n) for n in ("gcc-12", "linux-compiler-gcc-12-x86", "linux-kbuild-6.1",
                                "linux-headers-6.1.0-56-common", "linux-headers-6.1.0-56-amd64", "linux-headers-amd64")]
    assert [d.name for d in privapt.headers_only(closure)] == [
        "linux-headers-6.1.0-56-common", "linux-headers-6.1.0-56-amd64", "linux-headers-amd64"]


def test_headers_meta_per_distro() -> None:
    assert privapt.headers_meta(BOOKWORM, "amd64") == "linux-headers-amd64"
    assert privapt.headers_meta(BOOKWORM, "arm64") == "linux-headers-arm64"
    assert privapt.headers_meta(NOBLE, "amd64") == "linux-headers-generic"
