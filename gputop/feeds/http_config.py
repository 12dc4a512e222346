"""``--http.config.file``: how the fleet view logs in to Prometheus, in Prometheus' own HTTP client
configuration format (what ``promtool query --http.config.file`` and a scrape config's HTTP settings
take): ``basic_auth``, ``authorization`` (a bearer token or another scheme), ``tls_config`` and
``http_headers`` (a tenant's ``X-Scope-OrgID`` for Mimir, Cortex, Thanos). A setting gputop does not
implement (``oauth2``, ``proxy_url``...) is refused, never ignored: a login silently dropped would send
queries without it. Relative file names are the config file's directory's, as Prometheus resolves them.

Secrets (passwords, credentials, headers' ``secrets`` and ``files``) are read once, at start, by bounded
reads, and appear in no message, ``repr`` or log: an error names the field, never its value.
"""

from __future__ import annotations

import base64
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gputop import yamlconfig

#: the settings of Prometheus' HTTP client configuration gputop implements, and those it refuses
_TOP = {"basic_auth", "authorization", "bearer_token", "bearer_token_file", "tls_config", "http_headers",
        "follow_redirects", "enable_http2"}
_UNSUPPORTED = {"oauth2", "proxy_url", "no_proxy", "proxy_from_environment", "proxy_connect_header"}
_BASIC = {"username", "username_file", "password", "password_file"}
_AUTHORIZATION = {"type", "credentials", "credentials_file"}
_TLS = {"ca", "ca_file", "cert", "cert_file", "key", "key_file", "insecure_skip_verify", "min_version",
        "max_version"}
_HEADER = {"values", "secrets", "files"}
_TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1, "TLS12": ssl.TLSVersion.TLSv1_2,
                 "TLS13": ssl.TLSVersion.TLSv1_3}
#: headers the client sets itself (Prometheus' list of reserved headers, and what urllib writes)
_RESERVED = {"authorization", "host", "content-encoding", "content-length", "content-type", "user-agent",
             "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "www-authenticate",
             "accept-encoding", "x-prometheus-remote-write-version", "x-prometheus-remote-read-version",
             "x-prometheus-scrape-timeout-seconds", "te", "trailer", "transfer-encoding", "upgrade"}


@dataclass(frozen=True)
class HttpConfig:
    """What one ``--http.config.file`` says, its secrets read: the headers every request carries and the
    TLS settings. Picklable (the fleet view's reader runs in a child process); ``repr`` shows no secret."""

    path: str
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    ca_pem: str | None = field(default=None, repr=False)
    cert_pem: str | None = field(default=None, repr=False)
    key_pem: str | None = field(default=None, repr=False)
    insecure_skip_verify: bool = False
    min_version: str | None = None
    max_version: str | None = None

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of an https:// URL: the system's CAs, or ``ca``/``ca_file``'s; a client
        certificate when given; the versions allowed."""
        ctx = ssl.create_default_context(cadata=self.ca_pem) if self.ca_pem else ssl.create_default_context()
        if self.insecure_skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.min_version:
            ctx.minimum_version = _TLS_VERSIONS[self.min_version]
        if self.max_version:
            ctx.maximum_version = _TLS_VERSIONS[self.max_version]
        if self.cert_pem and self.key_pem:
            _load_chain(ctx, self.cert_pem, self.key_pem)
        return ctx


def _no_passphrase() -> str:
    """An encrypted key would make OpenSSL ask for its passphrase on the terminal: refused instead."""
    raise ValueError("tls_config: an encrypted key (give the key without a passphrase)")


def _load_chain(ctx: ssl.SSLContext, cert_pem: str, key_pem: str) -> None:
    """A client certificate and key given as text: ``ssl`` loads them from files only, so from a file of
    this process's own, readable by its user alone, deleted at once (the descriptor's path in /proc)."""
    fd = os.memfd_create("gputop-client-cert", os.MFD_CLOEXEC) if hasattr(os, "memfd_create") else None
    if fd is None:
        raise ValueError("tls_config: a client certificate needs Linux (memfd_create)")
    try:
        os.write(fd, (cert_pem.rstrip("\n") + "\n" + key_pem).encode())
        ctx.load_cert_chain(f"/proc/self/fd/{fd}", password=_no_passphrase)
    except ssl.SSLError as e:
        raise ValueError(f"tls_config: the client certificate and key do not load: {e.reason or e}") from None
    finally:
        os.close(fd)


def _section(doc: Mapping[str, Any], key: str, allowed: set[str]) -> dict[str, Any]:
    return yamlconfig.section(doc, key, allowed, who="gputop's fleet view")


def _one(section: Mapping[str, Any], inline: str, file: str, base: Path, where: str) -> str | None:
    """A value given inline or by file (both: refused, as Prometheus refuses them); file contents keep
    no trailing newline (Prometheus trims the whitespace around secrets read from files)."""
    if section.get(inline) is not None and section.get(file) is not None:
        raise ValueError(f"{where}: at most one of {inline} and {file}")
    if section.get(file) is not None:
        return yamlconfig.read_text(base, section[file], f"{where}.{file}").strip()
    value = section.get(inline)
    if value is None:
        return None
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ValueError(f"{where}.{inline}: expected text")
    return str(value)


def _header_value(v: str, name: str) -> str:
    if any(c in v for c in "\r\n\0"):
        raise ValueError(f"http_headers.{name}: a value holds a line break")
    if not v.isascii():
        raise ValueError(f"http_headers.{name}: a value is not ASCII")
    return v


def parse(doc: object, base: Path, path: str = "") -> HttpConfig:
    """An ``HttpConfig`` from the configuration's parsed YAML ``doc``; ValueError names what is wrong."""
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ValueError("expected a mapping of settings (basic_auth, authorization, tls_config, http_headers)")
    for key in doc:
        if key in _UNSUPPORTED:
            raise ValueError(f"{key} is not supported by gputop's fleet view (basic_auth, authorization, "
                             "tls_config and http_headers are)")
        if key not in _TOP:
            raise ValueError(f"unknown field {str(key)!a}")
    headers: list[tuple[str, str]] = []
    basic = _section(doc, "basic_auth", _BASIC)
    authz = _section(doc, "authorization", _AUTHORIZATION)
    bearer = _one(doc, "bearer_token", "bearer_token_file", base, "bearer_token")
    if bearer is not None and not bearer:
        raise ValueError("bearer_token: empty")
    if sum(x is not None and x != {} for x in (basic or None, authz or None, bearer)) > 1:
        raise ValueError("at most one of basic_auth, authorization and bearer_token")
    if basic:
        user = _one(basic, "username", "username_file", base, "basic_auth") or ""
        password = _one(basic, "password", "password_file", base, "basic_auth") or ""
        if not user:
            raise ValueError("basic_auth: a username is needed")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        _header_value(f"{user}:{password}", "Authorization")
        headers.append(("Authorization", f"Basic {token}"))
    if authz:
        kind = str(authz.get("type") or "Bearer")
        if kind.lower() == "basic" or not kind.isascii() or not kind.replace("-", "").isalnum():
            raise ValueError("authorization.type: a scheme name such as Bearer (basic: use basic_auth)")
        credentials = _one(authz, "credentials", "credentials_file", base, "authorization")
        if not credentials:
            raise ValueError("authorization: credentials or credentials_file is needed")
        headers.append(("Authorization", f"{kind} {_header_value(credentials, 'Authorization')}"))
    if bearer is not None:
        headers.append(("Authorization", f"Bearer {_header_value(bearer, 'Authorization')}"))
    extra = doc.get("http_headers")
    if extra is not None:
        if not isinstance(extra, dict):
            raise ValueError("http_headers: expected a mapping of header names")
        for name, spec in extra.items():
            name = str(name)
            if not name.isascii() or not name.replace("-", "").isalnum():
                raise ValueError(f"http_headers: not a header name: {name!a}")
            if name.lower() in _RESERVED:
                raise ValueError(f"http_headers: {name} is set by the client itself")
            if not isinstance(spec, dict) or set(spec) - _HEADER:
                raise ValueError(f"http_headers.{name}: expected values, secrets or files")
            for part in ("values", "secrets", "files"):
                items = spec.get(part) or []
                if not isinstance(items, list):
                    raise ValueError(f"http_headers.{name}.{part}: expected a list")
                for item in items:
                    v = (yamlconfig.read_text(base, item, f"http_headers.{name}.files").strip() if part == "files"
                         else str(item))
                    headers.append((name, _header_value(v, name)))
    if isinstance(doc.get("tls_config"), dict) and "server_name" in doc["tls_config"]:
        raise ValueError("tls_config.server_name is not supported by gputop's fleet view (the URL's host is the "
                         "name checked)")
    tls = _section(doc, "tls_config", _TLS)
    ca = _one(tls, "ca", "ca_file", base, "tls_config")
    cert = _one(tls, "cert", "cert_file", base, "tls_config")
    key = _one(tls, "key", "key_file", base, "tls_config")
    if bool(cert) != bool(key):
        raise ValueError("tls_config: a client certificate needs both cert(_file) and key(_file)")
    for bound in ("min_version", "max_version"):
        if tls.get(bound) is not None and tls[bound] not in _TLS_VERSIONS:
            raise ValueError(f"tls_config.{bound}: one of {', '.join(_TLS_VERSIONS)}")
    skip = tls.get("insecure_skip_verify", False)
    if not isinstance(skip, bool):
        raise ValueError("tls_config.insecure_skip_verify: true or false")
    for flag in ("follow_redirects", "enable_http2"):      # HTTP/2 or not: the transport's choice
        if doc.get(flag) is not None and not isinstance(doc[flag], bool):
            raise ValueError(f"{flag}: true or false")
    if doc.get("follow_redirects") is False:
        raise ValueError("follow_redirects: false is not supported by gputop's fleet view (it follows them)")
    config = HttpConfig(path, tuple(headers), ca, cert, key, skip, tls.get("min_version"), tls.get("max_version"))
    try:
        config.ssl_context()        # certificates that do not load are refused now, not at the first query
    except ssl.SSLError as e:
        raise ValueError(f"tls_config: the CA does not load: {e.reason or e}") from None
    return config


def load(path: str) -> HttpConfig:
    """The configuration in file ``path`` (YAML), its secrets read; ValueError says what is wrong."""
    return yamlconfig.load(path, "--http.config.file", lambda doc, base: parse(doc, base, path))
