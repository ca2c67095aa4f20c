"""HTTPS: the service's certificate checked against a CA file; untrusted is
``Unavailable`` with cause ``tls`` (nothing was sent)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness import start_service
from leasehold import Acquired, Attempt, Client, Unavailable


def make_certificates(dir: Path) -> tuple[Path, Path, Path]:
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=dir)

    run(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=leasehold test CA",
    )
    run(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    )
    (dir / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    run(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    )
    return dir / "ca.pem", dir / "server.pem", dir / "server.key"


def test_https_with_a_ca_file(tmp_path: Path) -> None:
    ca, cert, key = make_certificates(tmp_path)
    service = start_service(
        ca_file=str(ca), LEASEHOLD_TLS_CERT_FILE=str(cert), LEASEHOLD_TLS_KEY_FILE=str(key)
    )
    try:
        assert service.url.startswith("https://")
        with Client(service.url, ca_file=str(ca)) as c:
            got = c.acquire("py-tls", "x", attempt=c.attempt(), ttl=5)
            assert isinstance(got, Acquired)
            got.handle.release()
        with Client(service.url) as untrusting, pytest.raises(Unavailable) as caught:
            untrusting.acquire("py-tls", "x", attempt=Attempt.generate("op"), ttl=5)
        assert caught.value.cause == "tls"
    finally:
        service.stop()
