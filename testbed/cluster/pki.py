"""The test cluster's own certificates: a CA, the API server's serving certificate, client certificates
for the admin and each control-plane component, and the service-account signing key.

Everything is made fresh for each cluster (EC P-256 keys, one day of validity) and written into its state
directory; nothing is shared with another cluster or with the user's own kubeconfig.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICE_IP = "10.0.0.1"
"""The ``kubernetes`` Service's cluster IP: the first address of ``--service-cluster-ip-range``."""

CLIENTS = {
    "admin": ("kubernetes-admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", None),
    "scheduler": ("system:kube-scheduler", None),
    "kubelet": ("system:node:real-0", "system:nodes"),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", "system:masters"),
}
"""Client certificate name -> (common name = user, organisation = group); RBAC binds each user. ``kubelet`` is
the real node's (``realnode.py``; the Node authorizer's ``system:node:<name>``), ``apiserver-kubelet-client`` the
one the API server shows a kubelet (``--kubelet-client-certificate``)."""


@dataclass(frozen=True)
class Pki:
    """Paths of the files ``make_pki`` wrote (PEM)."""

    directory: Path

    @property
    def ca(self) -> Path:
        """The CA certificate clients trust and the API server checks client certificates against."""
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        """The CA's key (the controller manager signs CSRs with it)."""
        return self.directory / "ca.key"

    def cert(self, name: str) -> Path:
        """The certificate ``name`` (``apiserver`` or a key of ``CLIENTS``)."""
        return self.directory / f"{name}.crt"

    def key(self, name: str) -> Path:
        """The private key of certificate ``name``."""
        return self.directory / f"{name}.key"

    @property
    def service_account_key(self) -> Path:
        """The key service-account tokens are signed with."""
        return self.directory / "sa.key"

    @property
    def service_account_pub(self) -> Path:
        """Its public key, which the API server verifies tokens with."""
        return self.directory / "sa.pub"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def _name(common: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey | rsa.RSAPublicKey,
             days: int = 1) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days)))


def _issue(issuer: x509.Name, ca_key: ec.EllipticCurvePrivateKey, subject: x509.Name,
           usage: x509.ObjectIdentifier, sans: list[x509.GeneralName], cert_path: Path, key_path: Path) -> None:
    """Write a leaf certificate for ``subject`` (``usage``, ``sans``) signed by the CA, and its key."""
    key = _key()
    builder = (_builder(subject, issuer, key.public_key())
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert_path.write_bytes(builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    _write_key(key, key_path)


def make_pki(directory: Path) -> Pki:
    """Write a fresh CA, serving and client certificates and the service-account key pair into ``directory``.

    The serving certificate names 127.0.0.1, localhost and the in-cluster names of the ``kubernetes``
    Service, so clients on this machine and pods' service-account clients both verify it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    ca_key = _key()
    ca_name = _name("trainplane-test-ca")
    ca = (_builder(ca_name, ca_name, ca_key.public_key())
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    pki.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(ca_key, pki.ca_key)

    def issue(name: str, subject: x509.Name, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]) -> None:
        _issue(ca_name, ca_key, subject, usage, sans, pki.cert(name), pki.key(name))

    dns = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
           "kubernetes.default.svc.cluster.local"]
    ips = ["127.0.0.1", SERVICE_IP]
    issue("apiserver", _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH,
          [*(x509.DNSName(d) for d in dns), *(x509.IPAddress(ipaddress.ip_address(i)) for i in ips)])
    for name, (user, group) in CLIENTS.items():
        issue(name, _name(user, group), ExtendedKeyUsageOID.CLIENT_AUTH, [])
    sa = _key()
    _write_key(sa, pki.service_account_key)
    pki.service_account_pub.write_bytes(sa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return pki


def kubeconfig(pki: Pki, client: str, server: str) -> str:
    """A kubeconfig (YAML text) for ``client`` (a key of ``CLIENTS``) at ``server`` (``https://host:port``)."""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: trainplane-test
  cluster:
    server: {server}
    certificate-authority: {pki.ca}
users:
- name: {client}
  user:
    client-certificate: {pki.cert(client)}
    client-key: {pki.key(client)}
contexts:
- name: trainplane-test
  context:
    cluster: trainplane-test
    user: {client}
current-context: trainplane-test
"""


def issue_loopback_serving(pki: Pki, directory: Path, common: str, ips: tuple[str, ...] = ()) -> Path:
    """A serving certificate for ``127.0.0.1``, ``localhost`` and ``ips`` signed by the cluster's CA, written as
    ``tls.crt`` and ``tls.key`` into ``directory`` (the names controller-runtime's webhook server reads), so
    the API server verifies a webhook (or the real node's kubelet, on its bridge address) on this machine the way
    it verifies its own clients' servers.

    Returns:
        ``directory``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{pki.ca_key} holds no EC key")
    addresses = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", *ips)]
    _issue(ca_cert.subject, ca_key, _name(common), ExtendedKeyUsageOID.SERVER_AUTH,
           [x509.DNSName("localhost"), *addresses], directory / "tls.crt", directory / "tls.key")
    return directory


def rotator_secret(ca_name: str, dns_name: str, days: int) -> dict[str, bytes]:
    """The data of a webhook certificate Secret as open-policy-agent/cert-controller's rotator keeps it (``ca.crt``,
    ``ca.key``, ``tls.crt``, ``tls.key``): a CA of its own whose certificate names ``ca_name`` and a serving
    certificate for ``dns_name`` and ``127.0.0.1``, both valid ``days`` days.

    The rotator keeps such a Secret as it is when both verify for its names more than its look-ahead (90 days)
    from now (cert-controller v0.16.0 ``pkg/rotator/rotator.go``, ``refreshCertIfNeeded``, ``ValidCert``), and
    injects ``ca.crt`` into its webhook configuration, so a webhook server on this machine is trusted for a URL
    on ``127.0.0.1``, which the certificate it would make (``dns_name`` only) is not. Its keys are RSA in PKCS #1
    ("RSA PRIVATE KEY"), the only form the rotator reads back (``buildArtifactsFromSecret``:
    ``x509.ParsePKCS1PrivateKey``; with an EC or PKCS #8 key it logs "secret is not well-formed" and never
    reports ready).
    """
    ca_key, key = _rsa_key(), _rsa_key()
    subject = _name(ca_name)
    ca = (_builder(subject, subject, ca_key.public_key(), days)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectAlternativeName([x509.DNSName(ca_name)]), critical=False)
          .sign(ca_key, hashes.SHA256()))
    serving = (_builder(_name(dns_name), subject, key.public_key(), days)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
               .add_extension(x509.SubjectAlternativeName(
                   [x509.DNSName(dns_name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
               .sign(ca_key, hashes.SHA256()))

    def pem_key(k: rsa.RSAPrivateKey) -> bytes:
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                               serialization.NoEncryption())

    return {"ca.crt": ca.public_bytes(serialization.Encoding.PEM), "ca.key": pem_key(ca_key),
            "tls.crt": serving.public_bytes(serialization.Encoding.PEM), "tls.key": pem_key(key)}
