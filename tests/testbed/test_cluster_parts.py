"""The pure parts of the live controllers' harness: the named build parts, the upstream replace lines restated,
the certificate Secret the training operator's rotator keeps, the operator's command line and the second
scheduler's profile from the chart's values."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from testbed.cluster import coscheduling, training_operator
from testbed.cluster.build import PARTS, TOOLS, BuildError, binary, served_replaces, tool_dir, upstream_replaces
from testbed.cluster.pki import rotator_secret
from testbed.cluster.versions import SCHEDULER_PLUGINS_KUBERNETES, SERVED_INSTEAD

pytestmark = pytest.mark.unit

LOOKAHEAD = datetime.timedelta(days=90)
"""cert-controller v0.16.0 ``pkg/rotator/rotator.go``, ``defaultLookaheadInterval``: a certificate that expires
sooner is made again (with the service name only)."""


def test_the_named_parts_are_not_in_the_default_build_and_their_error_says_how_to_build_them() -> None:
    assert not {tool for tools in PARTS.values() for tool in tools} & set(TOOLS)
    assert [tool.binaries for tool in PARTS["training-operator"]] == [("training-operator",)]
    assert [tool.binaries for tool in PARTS["scheduler-plugins"]] == [("scheduler-plugins-scheduler",)]
    if not (tool_dir(PARTS["scheduler-plugins"][0]) / ".done").exists():
        with pytest.raises(BuildError, match="build --with scheduler-plugins"):
            binary("scheduler-plugins-scheduler")
    with pytest.raises(BuildError, match="no tool builds 'volcano'"):
        binary("volcano")


def test_upstream_replaces_are_restated_in_both_go_mod_forms_and_relative_ones_left_out() -> None:
    gomod = ("replace (\n\tk8s.io/api => k8s.io/api v0.34.7\n)\n\n"
             "replace k8s.io/externaljwt => k8s.io/externaljwt v0.34.7\n"
             "replace volcano.sh/apis => ./staging/src/volcano.sh/apis\n")
    assert upstream_replaces(gomod) == ["k8s.io/api => k8s.io/api v0.34.7",
                                        "k8s.io/externaljwt => k8s.io/externaljwt v0.34.7"]


def test_a_replace_to_a_refused_version_is_restated_at_the_served_one_and_the_others_as_they_are() -> None:
    gomod = ("replace (\n\tk8s.io/api => k8s.io/api v0.34.7\n"
             "\tk8s.io/csi-translation-lib => k8s.io/csi-translation-lib v0.34.7\n)\n")
    assert served_replaces(gomod) == ["k8s.io/api => k8s.io/api v0.34.7",
                                      "k8s.io/csi-translation-lib => k8s.io/csi-translation-lib "
                                      f"{SERVED_INSTEAD['k8s.io/csi-translation-lib']}"]
    assert SERVED_INSTEAD["k8s.io/csi-translation-lib"] != "v0.34.7"


def test_the_second_scheduler_reports_the_kubernetes_release_it_is_built_on() -> None:
    """The kube-scheduler framework (k8s.io/apiserver v0.34.7 ``pkg/util/compatibility/version.go``) takes the
    binary's ``gitVersion`` as its Kubernetes version and refuses to start on a 0.x one, such as scheduler-plugins'
    own ``v0.34.7``."""
    (tool,) = PARTS["scheduler-plugins"]
    (flag,) = tool.ldflags
    assert flag == f"k8s.io/component-base/version.gitVersion={SCHEDULER_PLUGINS_KUBERNETES}"
    assert SCHEDULER_PLUGINS_KUBERNETES.startswith("v1.34.")


def test_the_rotator_secret_verifies_for_the_service_name_and_loopback_beyond_the_rotators_lookahead() -> None:
    data = rotator_secret("training-operator-ca", "training-operator.kubeflow.svc", days=365)
    assert set(data) == {"ca.crt", "ca.key", "tls.crt", "tls.key"}
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    serving = x509.load_pem_x509_certificate(data["tls.crt"])
    serving.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName) == ["training-operator-ca"]
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["training-operator.kubeflow.svc"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    horizon = datetime.datetime.now(datetime.timezone.utc) + LOOKAHEAD
    assert ca.not_valid_after_utc > horizon and serving.not_valid_after_utc > horizon
    assert isinstance(serving.public_key(), rsa.RSAPublicKey)
    # The rotator reads its keys back with x509.ParsePKCS1PrivateKey (cert-controller v0.16.0
    # pkg/rotator/rotator.go, buildArtifactsFromSecret): RSA, PEM type "RSA PRIVATE KEY".
    for name in ("ca.key", "tls.key"):
        assert data[name].startswith(b"-----BEGIN RSA PRIVATE KEY-----"), name
        assert isinstance(serialization.load_pem_private_key(data[name], password=None), rsa.RSAPrivateKey)


def test_the_operators_command_keeps_the_rendered_args_first_and_moves_only_its_listeners() -> None:
    command = training_operator.command(["--gang-scheduler-name=volcano"], Path("/k/config"), (1, 2, 3))
    assert command == ["--gang-scheduler-name=volcano", "--kubeconfig=/k/config",
                       "--health-probe-bind-address=127.0.0.1:1", "--metrics-bind-address=127.0.0.1:2",
                       "--webhook-server-port=3", "--enable-scheme=pytorchjob", "--leader-elect=false"]


def test_the_second_schedulers_profile_is_the_charts_with_only_the_kept_plugins() -> None:
    values = {"scheduler": {"name": "scheduler-plugins-scheduler", "leaderElect": False},
              "plugins": {"enabled": ["Coscheduling", "CapacityScheduling", "NodeResourceTopologyMatch",
                                      "NodeResourcesAllocatable"],
                          "disabled": ["PrioritySort"]},
              "pluginConfig": [{"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": 10}}]}
    config = coscheduling.scheduler_config(values, Path("/k/config"))
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["clientConnection"] == {"kubeconfig": "/k/config"}
    assert config["profiles"] == [{
        "schedulerName": "scheduler-plugins-scheduler",
        "plugins": {"multiPoint": {"enabled": [{"name": "Coscheduling"}, {"name": "NodeResourcesAllocatable"}],
                                   "disabled": [{"name": "PrioritySort"}]}},
        "pluginConfig": [{"name": "Coscheduling", "args": {"permitWaitingTimeSeconds": 10}}]}]
