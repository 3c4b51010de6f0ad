"""A job's cloud identity and secrets: an IAM role for its pods, env taken from Secrets, image pull secrets.

- ``iam_role_arn``: the job creates a ServiceAccount named after the job and its pods run as it. With
  ``iam_binding="pod-identity"`` an EKS Pod Identity association binds the role to it (the cluster runs the
  ``eks-pod-identity-agent`` add-on, which the EKS component installs); with ``"irsa"`` the ServiceAccount
  carries ``eks.amazonaws.com/role-arn`` (the role trusts the cluster's OIDC provider). Either way the EKS
  webhook mounts the pod's own projected token, so the Kubernetes API token stays unmounted (EKS User Guide,
  awsdocs/amazon-eks-user-guide ``latest/ug/manage-access/aws-access/pod-id-how-it-works.adoc`` and
  ``iam-roles-for-service-accounts.adoc``).
- ``secret_env``: variables read from existing Secrets (``valueFrom.secretKeyRef``): the value never sits in
  the pod template or in Pulumi's state.
- ``secret_values``: values (e.g. a secret Output) the job keeps in a Secret of its own, ``<job>-env``, and
  passes by reference: the pod template holds only the reference, the Secret's data stays a Pulumi secret.
- ``image_pull_secrets``: ``kubernetes.io/dockerconfigjson`` Secrets for a private registry.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Optional

from components.errors import InvalidJobArgs
from components.job import checks
from components.job.inputchecks import frozen
from components.outputs import lift

IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"
"""The ServiceAccount annotation the EKS Pod Identity Webhook reads for IRSA."""
POD_IDENTITY = "pod-identity"
IRSA = "irsa"
IAM_BINDINGS = (POD_IDENTITY, IRSA)
ROLE_ARN = re.compile(r"^arn:aws(-cn|-us-gov)?:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
SELECTOR_KEYS = frozenset({"name", "key", "optional"})
"""The fields of ``SecretKeySelector`` (k8s.io/api ``core/v1/types.go``)."""
ENV_SECRET_SUFFIX = "-env"  # noqa: S105 - a name's suffix, not a secret


def check_role_arn(value: Any) -> Optional[str]:
    """The check of ``iam_role_arn``: an IAM role ARN, or ``None``."""
    if value is not None and (not isinstance(value, str) or not ROLE_ARN.match(value)):
        raise InvalidJobArgs("iam_role_arn", value, "not an IAM role ARN",
                             'pass e.g. "arn:aws:iam::123456789012:role/trainer" (a Role resource\'s arn)')
    return value


def check_cluster_name(value: Any) -> Optional[str]:
    """The check of ``eks_cluster_name``: a non-empty name, or ``None``."""
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidJobArgs("eks_cluster_name", value, "not an EKS cluster name", "pass the cluster's name")
    return value


def check_secret_env(value: Any) -> Mapping[str, Mapping[str, Any]]:
    """The check of ``secret_env``: variable name to a SecretKeySelector (``name``, ``key``, ``optional``).

    Raises:
        InvalidJobArgs: names the variable and the fix.
    """
    if not isinstance(value, Mapping):
        raise InvalidJobArgs("secret_env", value, "must be a mapping of variable names to Secret keys",
                             'pass {"HF_TOKEN": {"name": "hf", "key": "token"}}')
    for name, selector in value.items():
        checks.require_env_name(f"secret_env[{name!r}]", name)
        if not isinstance(selector, Mapping) or not {"name", "key"} <= set(selector) <= SELECTOR_KEYS:
            raise InvalidJobArgs(f"secret_env[{name!r}]", selector, "not a SecretKeySelector",
                                 f'use {{"name": <Secret>, "key": <key>}} with keys from {sorted(SELECTOR_KEYS)}')
        checks.require_dns1123_subdomain(f"secret_env[{name!r}].name", selector["name"])
    return frozen({k: frozen(v) for k, v in value.items()})


def check_secret_values(value: Any) -> Mapping[str, str]:
    """The check of ``secret_values``: variable name to a string value.

    Raises:
        InvalidJobArgs: names the variable and the fix.
    """
    if not isinstance(value, Mapping):
        raise InvalidJobArgs("secret_values", value, "must be a mapping of variable names to values",
                             'pass {"WANDB_API_KEY": config.require_secret("wandb")}')
    for name, item in value.items():
        checks.require_env_name(f"secret_values[{name!r}]", name)
        if not isinstance(item, str):
            raise InvalidJobArgs(f"secret_values[{name!r}]", "[secret]", "values are strings", "pass a string")
    return frozen(value)


def check_pull_secrets(value: Any) -> tuple[str, ...]:
    """The check of ``image_pull_secrets``: names of Secrets in the job's namespace."""
    kept = frozen(value)
    checks.require_list("image_pull_secrets", kept)
    for i, name in enumerate(kept):
        checks.require_dns1123_subdomain(f"image_pull_secrets[{i}]", name)
    return kept


CHECKS = {
    "iam_role_arn": check_role_arn,
    "eks_cluster_name": check_cluster_name,
    "secret_env": check_secret_env,
    "secret_values": check_secret_values,
    "image_pull_secrets": check_pull_secrets,
}
"""The checks of this module's fields that take a ``pulumi.Input``."""


def env_secret_name(job: str) -> str:
    """The Secret holding a job's ``secret_values``."""
    return f"{job}{ENV_SECRET_SUFFIX}"


def secret_env_entries(job: str, secret_env: Mapping[str, Mapping[str, Any]], secret_names: Iterable[str]
                       ) -> list[dict[str, Any]]:
    """The container env entries of ``secret_env`` and of the ``secret_values`` named: references only."""
    entries = [{"name": name, "valueFrom": {"secretKeyRef": dict(selector)}} for name, selector in secret_env.items()]
    entries += [{"name": name, "valueFrom": {"secretKeyRef": {"name": env_secret_name(job), "key": name}}}
                for name in secret_names]
    return entries


def env_secret_manifest(job: str, namespace: Any, labels: Any, values: Any) -> dict[str, Any]:
    """The Secret of ``secret_values`` (a mapping or an Output of one); the component marks its data secret."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": env_secret_name(job), "namespace": namespace, "labels": labels},
        "type": "Opaque",
        "stringData": lift(dict, values),
    }


def service_account_manifest(job: str, namespace: Any, labels: Any, role_arn: Any, binding: str) -> dict[str, Any]:
    """The job's ServiceAccount, named after the job; annotated with the role for IRSA."""
    metadata: dict[str, Any] = {"name": job, "namespace": namespace, "labels": labels}
    if binding == IRSA:
        metadata["annotations"] = {IRSA_ANNOTATION: role_arn}
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata, "automountServiceAccountToken": False}
