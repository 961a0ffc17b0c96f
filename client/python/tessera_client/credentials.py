"""Where a Client finds its TLS files and token: the CLI's rules.

The token is never an argument value (a script's command line shows in
`ps` to every user of the machine): it is read from `token_file`, else from
the file $TESSERA_TOKEN_FILE names, else taken from $TESSERA_TOKEN. TLS
files come from the arguments or $TESSERA_TLS_CA, $TESSERA_TLS_CERT and
$TESSERA_TLS_KEY; a CA turns TLS on. A token file holds exactly one token
(blank lines and '#' lines skipped), of at least 16 printable ASCII
characters without spaces, as common/secret_file.h requires.
"""
import os
from dataclasses import dataclass
from typing import Mapping, Optional

import grpc

MIN_TOKEN_CHARS = 16
MAX_SECRET_FILE_BYTES = 1 << 20


@dataclass(frozen=True)
class Credentials:
    tls_ca: Optional[bytes] = None
    tls_cert: Optional[bytes] = None
    tls_key: Optional[bytes] = None
    token: Optional[str] = None


def resolve(tls_ca: Optional[str], tls_cert: Optional[str], tls_key: Optional[str],
            token_file: Optional[str], environ: Mapping[str, str] = os.environ) -> Credentials:
    """Reads the files the arguments or environment name. ValueError names
    the argument or variable whose file or token is bad."""
    def pick(value: Optional[str], variable: str):
        if value:
            return value, variable.lower().replace("tessera_", "")
        return environ.get(variable) or None, variable

    ca_path, ca_source = pick(tls_ca, "TESSERA_TLS_CA")
    cert_path, cert_source = pick(tls_cert, "TESSERA_TLS_CERT")
    key_path, key_source = pick(tls_key, "TESSERA_TLS_KEY")
    if bool(cert_path) != bool(key_path):
        raise ValueError("tls_cert and tls_key go together (a client certificate needs its key)")
    token_path, token_source = pick(token_file, "TESSERA_TOKEN_FILE")
    token = None
    if token_path:
        token = parse_single_token(token_source, read_secret_file(token_source, token_path).decode(
            "utf-8", errors="replace"))
    elif environ.get("TESSERA_TOKEN"):
        token = parse_single_token("TESSERA_TOKEN", environ["TESSERA_TOKEN"])
    return Credentials(
        tls_ca=read_secret_file(ca_source, ca_path) if ca_path else None,
        tls_cert=read_secret_file(cert_source, cert_path) if cert_path else None,
        tls_key=read_secret_file(key_source, key_path) if key_path else None,
        token=token)


def read_secret_file(source: str, path: str) -> bytes:
    try:
        with open(os.path.expanduser(path), "rb") as f:
            data = f.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as err:
        raise ValueError("%s: cannot read %s: %s" % (source, path, err.strerror)) from None
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise ValueError("%s: %s is larger than %d bytes" % (source, path, MAX_SECRET_FILE_BYTES))
    if not data:
        raise ValueError("%s: %s is empty" % (source, path))
    return data


def parse_single_token(source: str, text: str) -> str:
    tokens = [line.strip() for line in text.split("\n")]
    tokens = [t for t in tokens if t and not t.startswith("#")]
    if len(tokens) != 1:
        raise ValueError("%s: must hold exactly one token (found %d)" % (source, len(tokens)))
    token = tokens[0]
    if len(token) < MIN_TOKEN_CHARS:
        raise ValueError("%s: a token must be at least %d characters" % (source, MIN_TOKEN_CHARS))
    if any(ord(c) <= 0x20 or ord(c) >= 0x7f for c in token):
        raise ValueError("%s: a token must be printable ASCII without spaces" % source)
    return token


def open_channel(address: str, credentials: Credentials, options) -> grpc.Channel:
    """A plaintext or TLS channel that sends the token on every call."""
    if credentials.tls_ca or credentials.tls_cert:
        channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(
            root_certificates=credentials.tls_ca, private_key=credentials.tls_key,
            certificate_chain=credentials.tls_cert), options=options)
    else:
        channel = grpc.insecure_channel(address, options=options)
    if credentials.token:
        channel = grpc.intercept_channel(channel, _BearerToken(credentials.token))
    return channel


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, base, metadata):
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = base.wait_for_ready
        self.compression = getattr(base, "compression", None)


class _BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds `authorization: Bearer TOKEN` to every call, as the C++ client
    does. An interceptor rather than call credentials, so that a plaintext
    loopback coordinator that checks tokens works too."""

    def __init__(self, token: str):
        self._header = ("authorization", "Bearer " + token)

    def _details(self, base):
        return _CallDetails(base, list(base.metadata or ()) + [self._header])

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)
