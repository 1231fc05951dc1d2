"""aml_pki.py — the double's certificates, made with the openssl command line.

In DIR:
  ca.pem, ca.key            a throw-away CA (EC P-256), the one tests trust
  server.pem, server.key    the TLS certificate for 127.0.0.1 / localhost, signed by the CA
  client.pem                RSA-2048 key + self-signed certificate of the app registration
                            (the form AZURE_CLIENT_CERTIFICATE_PATH expects: key and certificate in one PEM)
  client-encrypted.pem      the same key encrypted (AES-256) with the configured password, + certificate
  client.crt, client.key    the same certificate and key, separately
"""
import base64
import hashlib
import os
import subprocess

from cryptography import x509
from cryptography.hazmat.primitives import serialization


def _openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    if r.returncode != 0:
        raise RuntimeError("openssl %s failed: %s" % (" ".join(args), r.stderr.decode(errors="replace")))


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_all(d, client_password):
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "7",
             "-subj", "/CN=flow AML double test CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-addext", "subjectKeyIdentifier=hash", cwd=d)
    _openssl("req", "-new", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("basicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n"
                "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "subjectKeyIdentifier=hash\n"
                "authorityKeyIdentifier=keyid\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "7", "-out", "server.pem", "-extfile", "server.ext", cwd=d)
    # the app registration's certificate: self-signed RSA, as Entra accepts
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key", "-out", "client.crt",
             "-days", "7", "-subj", "/CN=flow-aml-double-client", cwd=d)
    _openssl("pkey", "-in", "client.key", "-aes256", "-passout", "pass:" + client_password,
             "-out", "client-encrypted.key", cwd=d)
    for name, key in (("client.pem", "client.key"), ("client-encrypted.pem", "client-encrypted.key")):
        with open(os.path.join(d, name), "w") as out:
            for part in (key, "client.crt"):
                with open(os.path.join(d, part)) as f:
                    out.write(f.read())
    for junk in ("server.csr", "server.ext", "ca.srl", "client-encrypted.key"):
        try:
            os.unlink(os.path.join(d, junk))
        except FileNotFoundError:
            pass
    os.chmod(os.path.join(d, "client.pem"), 0o600)


class ClientCert:
    """A registered certificate: its thumbprints and public key."""

    def __init__(self, pem_bytes):
        self.cert = x509.load_pem_x509_certificate(pem_bytes)
        der = self.cert.public_bytes(serialization.Encoding.DER)
        self.x5t = b64url(hashlib.sha1(der).digest())
        self.x5t_s256 = b64url(hashlib.sha256(der).digest())
        self.thumbprint_hex = hashlib.sha1(der).hexdigest().upper()
        self.public_key = self.cert.public_key()
        self.der = der

    @classmethod
    def from_file(cls, path):
        with open(path, "rb") as f:
            return cls(f.read())
