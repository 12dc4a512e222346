"""``--web.config.file``: the exporter's TLS and basic auth in the format of Prometheus' exporter-toolkit
(what node_exporter, the DCGM exporter and Prometheus itself take), so that a site's existing file works:

    tls_server_config:
      cert_file: server.crt
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert   # or VerifyClientCertIfGiven, NoClientCert (default)
      client_ca_file: clients-ca.crt
      min_version: TLS12                              # the default, as exporter-toolkit's
    basic_auth_users:
      prometheus: $2y$10$...                          # bcrypt hashes (htpasswd -nBC 10 prometheus)

A setting gputop's server does not implement is refused with a message, never ignored (a policy silently
dropped would serve what it should not). The file is read once, at start; relative names are its
directory's. Passwords are checked with the ``bcrypt`` module; a login that passed is remembered (by a
hash of what the client sent) so that a scrape every few seconds costs one bcrypt check, not one each.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gputop import yamlconfig

#: logins remembered after a successful check (a bounded set: a client inventing passwords fills nothing,
#: only successes are kept)
MAX_REMEMBERED = 64

_TOP = {"tls_server_config", "basic_auth_users", "http_server_config"}
_TLS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version"}
_TLS_UNSUPPORTED = {"cert", "key", "client_allowed_sans", "cipher_suites", "prefer_server_cipher_suites",
                    "curve_preferences"}
_HTTP = {"http2"}
_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1, "TLS12": ssl.TLSVersion.TLSv1_2,
             "TLS13": ssl.TLSVersion.TLSv1_3}
#: exporter-toolkit's client_auth_type -> what Python's ssl does ("RequestClientCert" and
#: "RequireAnyClientCert" ask for a certificate without verifying it, which Python's ssl cannot)
_CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}


def _bcrypt_check(password: bytes, hashed: bytes) -> bool:
    """Whether ``password`` is the one bcrypt ``hashed`` (a malformed hash: no). bcrypt reads 72 bytes of a
    password (Go's, which exporter-toolkit uses, ignores the rest; the module refuses it: cut here)."""
    import bcrypt  # loaded when the exporter asks for a login

    try:
        return bool(bcrypt.checkpw(password[:72], hashed))
    except ValueError:
        return False


#: checked for a user that does not exist, so that an unknown user costs what a known one does (no user
#: names told by timing): a bcrypt hash at cost 10 of a password nobody knows
_DUMMY_HASH = b"$2b$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy"


@dataclass
class WebConfig:
    """What one ``--web.config.file`` says: the TLS context (None: plain HTTP) and the basic-auth users
    (empty: no login asked)."""

    path: str
    tls: ssl.SSLContext | None = None
    users: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    _check: Callable[[bytes, bytes], bool] | None = field(default=None, repr=False)
    _remembered: dict[bytes, None] = field(default_factory=dict, repr=False)
    #: the remembered logins' key: a process's own, random (a memory dump holds no plain hash of a password)
    _key: bytes = field(default_factory=lambda: os.urandom(32), repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def allows(self, authorization: str | None) -> bool:
        """Whether a request with this ``Authorization`` header may be answered (always, without users)."""
        if not self.users:
            return True
        if not authorization or authorization[:6].lower() != "basic ":
            return False
        try:
            user_pass = base64.b64decode(authorization[6:].strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        user, sep, password = user_pass.partition(b":")
        hashed = self.users.get(user.decode("utf-8", "replace"))
        if not sep or self._check is None:
            return False
        if hashed is None:
            self._check(password, _DUMMY_HASH)          # the time a known user's check takes
            return False
        key = hmac.new(self._key, user_pass + b"\0" + hashed, hashlib.sha256).digest()
        with self._lock:
            if key in self._remembered:
                return True
        if not self._check(password, hashed):
            return False
        with self._lock:
            if len(self._remembered) >= MAX_REMEMBERED:
                self._remembered.pop(next(iter(self._remembered)))
            self._remembered[key] = None
        return True


def _mapping(doc: Mapping[str, Any], key: str, allowed: set[str], refused: frozenset[str] = frozenset()) -> dict[
        str, Any]:
    return yamlconfig.section(doc, key, allowed, refused, who="gputop's exporter")


def _no_passphrase() -> str:
    raise ValueError("tls_server_config: an encrypted key (give the key without a passphrase)")


def _tls_context(tls: Mapping[str, Any], base: Path) -> ssl.SSLContext:
    if not tls.get("cert_file") or not tls.get("key_file"):
        raise ValueError("tls_server_config: cert_file and key_file are needed")
    cert = yamlconfig.named_file(base, tls["cert_file"], "tls_server_config.cert_file")
    key = yamlconfig.named_file(base, tls["key_file"], "tls_server_config.key_file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for bound, attr, default in (("min_version", "minimum_version", "TLS12"), ("max_version", "maximum_version",
                                                                             None)):
        value = tls.get(bound, default)
        if value is None:
            continue
        if value not in _VERSIONS:
            raise ValueError(f"tls_server_config.{bound}: one of {', '.join(_VERSIONS)}")
        setattr(ctx, attr, _VERSIONS[value])
    try:
        ctx.load_cert_chain(cert, key, password=_no_passphrase)
    except ssl.SSLError as e:
        raise ValueError(f"tls_server_config: the certificate and key do not load: {e.reason or e}") from None
    kind = tls.get("client_auth_type", "NoClientCert")
    if kind in ("RequestClientCert", "RequireAnyClientCert"):
        raise ValueError(f"tls_server_config.client_auth_type {kind} (a certificate asked, not verified) is not "
                         "supported by gputop's exporter: use VerifyClientCertIfGiven or RequireAndVerifyClientCert")
    if kind not in _CLIENT_AUTH:
        raise ValueError(f"tls_server_config.client_auth_type: one of {', '.join(_CLIENT_AUTH)}")
    ctx.verify_mode = _CLIENT_AUTH[kind]
    if kind != "NoClientCert":
        if not tls.get("client_ca_file"):
            raise ValueError(f"tls_server_config: client_auth_type {kind} needs client_ca_file")
        try:
            ctx.load_verify_locations(yamlconfig.named_file(base, tls["client_ca_file"],
                                                            "tls_server_config.client_ca_file"))
        except ssl.SSLError as e:
            raise ValueError(f"tls_server_config.client_ca_file does not load: {e.reason or e}") from None
    elif tls.get("client_ca_file"):
        raise ValueError("tls_server_config: client_ca_file without a client_auth_type that verifies")
    return ctx


def parse(doc: object, base: Path, path: str = "") -> WebConfig:
    """A ``WebConfig`` from the file's parsed YAML ``doc``; ValueError names what is wrong (never a hash)."""
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ValueError("expected a mapping (tls_server_config, basic_auth_users)")
    for key in doc:
        if key not in _TOP:
            raise ValueError(f"unknown field {str(key)!a}")
    tls = _mapping(doc, "tls_server_config", _TLS, frozenset(_TLS_UNSUPPORTED))
    http = _mapping(doc, "http_server_config", _HTTP, frozenset({"headers"}))
    if http.get("http2") is not None and not isinstance(http["http2"], bool):
        raise ValueError("http_server_config.http2: true or false")
    users_doc = doc.get("basic_auth_users") or {}
    if not isinstance(users_doc, dict):
        raise ValueError("basic_auth_users: expected a mapping of user names to bcrypt hashes")
    users: dict[str, bytes] = {}
    for user, hashed in users_doc.items():
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise ValueError(f"basic_auth_users.{str(user)!a}: expected a bcrypt hash ($2y$...)")
        users[str(user)] = hashed.encode()
    return WebConfig(path, _tls_context(tls, base) if tls else None, users, _bcrypt_check)


def load(path: str) -> WebConfig:
    """The configuration in file ``path``; ValueError says what is wrong."""
    return yamlconfig.load(path, "--web.config.file", lambda doc, base: parse(doc, base, path))
