"""TLS for the fake API server, as a real API server serves it: a CA of its own, made at start, and a serving
certificate for ``127.0.0.1`` signed by it.

A client then verifies the server as it verifies a real one (the kubeconfig carries the CA, the
certificate names the address), and pays what a real client pays: the handshake per connection, the
encryption of every byte. A benchmark over plain HTTP measures a client cheaper than the real one.

ALPN: a real kube-apiserver offers ``h2`` and ``http/1.1``. This server speaks HTTP/1.1 only, so it offers
only that; lightkube's clients (``http2`` off by default, as fakegpu makes them) ask for ``http/1.1`` alone,
so against either server they end up on HTTP/1.1.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVED_ADDRESS = "127.0.0.1"


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass(frozen=True)
class ServingTls:
    """A fresh CA (``ca_pem``, for kubeconfigs and clients) and the server context its certificate serves with."""

    ca_pem: bytes
    context: ssl.SSLContext

    def client_context(self) -> ssl.SSLContext:
        """A context that trusts this server only (the CA), as a kubeconfig's ``certificate-authority-data`` does."""
        return ssl.create_default_context(cadata=self.ca_pem.decode())


def make_serving_tls() -> ServingTls:
    """A CA and a certificate for ``127.0.0.1``, valid for a day; RSA 2048 keys, kubeadm's default, so a
    handshake costs the client what it costs against a kubeadm cluster."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fakegpu-test-apiserver-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),  # cert and CRL signing
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(SERVED_ADDRESS))]), critical=False
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    with tempfile.TemporaryDirectory() as folder:  # load_cert_chain reads files only
        chain, key_file = Path(folder, "tls.crt"), Path(folder, "tls.key")
        chain.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(_pem_key(key))
        context.load_cert_chain(chain, key_file)
    return ServingTls(ca.public_bytes(serialization.Encoding.PEM), context)
