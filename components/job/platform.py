"""The platform around a job's pods: storage, cloud identity, secrets by reference and EFA, for every backend.

Two entry points, which every workload kind goes through:

- :func:`platform_pod_spec` finishes a PodSpec (``containers[0]`` is the agent's container): volumes and
  mounts, the checkpoint dir and its env variable, env from Secrets, image pull secrets, the job's
  ServiceAccount, EFA devices and the node group's selector, and the pod annotation that keeps the cluster
  autoscaler from evicting a running rank.
- :func:`platform_manifests` returns the objects those pods need first: the claims the job creates, its
  ServiceAccount and the Secret of its ``secret_values``.

:func:`validate` holds the checks across these fields, run with the other rules when the args are built.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional, cast

import pulumi

from components.awaiting import CREATED, WAIT_FOR_ANNOTATION
from components.errors import InvalidJobArgs
from components.job import access, checks, fabric, volumes
from components.job.inputchecks import PROCESS_ENV, RESERVED_ENV_PREFIX
from components.job.naming import JobNames
from components.outputs import Labels, lift

if TYPE_CHECKING:
    from components.job.args import DistributedJobArgs

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
"""A pod annotated ``"false"`` keeps the Cluster Autoscaler from removing its node to consolidate
(kubernetes/autoscaler cluster-autoscaler-chart-9.59.0 ``cluster-autoscaler/FAQ.md``, "What types of pods can
prevent CA from removing a node?"): a rank is never moved mid-training; an idle node has no rank and is removed."""


def validate(a: DistributedJobArgs) -> None:
    """The checks across the platform fields; those that read an Input field run once it is plain.

    Raises:
        InvalidJobArgs: the first that fails, naming the field and the fix.
    """
    checks.require_int("efa", a.efa, 0)
    checks.require_choice("iam_binding", a.iam_binding, access.IAM_BINDINGS)
    if a.node_group is not None:
        checks.require_dns1123_label("node_group", a.node_group)
    volumes.check_claims(a.claims)
    checks.require_choice("claim_retention", a.claim_retention, volumes.CLAIM_RETENTIONS)
    plain = not any(isinstance(v, pulumi.Output) for v in (a.volumes, a.volume_mounts))
    if plain:
        volumes.check_storage(cast(Sequence[Mapping[str, Any]], a.volumes),
                              cast(Sequence[Mapping[str, Any]], a.volume_mounts),
                              a.claims, a.checkpoint_dir, a.checkpoint_claim)
    elif a.checkpoint_dir is not None or a.checkpoint_claim is not None:
        volumes.check_storage((), (), a.claims, a.checkpoint_dir, a.checkpoint_claim)
    if a.iam_role_arn is None:
        if a.eks_cluster_name is not None:
            raise InvalidJobArgs("eks_cluster_name", a.eks_cluster_name, "is only used with iam_role_arn",
                                 "set iam_role_arn or remove it")
    else:
        _validate_identity(a)
    if a.efa > 0 and a.memory is None:
        raise InvalidJobArgs("memory", None, f"an EFA pod requests {fabric.HUGEPAGES_RESOURCE}, which Kubernetes "
                             "accepts only beside a memory (or cpu) request", 'set memory, e.g. "64Gi"')
    names = _env_names(a)
    if names is not None:
        seen: set[str] = set()
        for field, name in names:
            if name in seen:
                raise InvalidJobArgs(f"{field}[{name!r}]", name, "is set twice (env, secret_env, secret_values "
                                     "and the variables trainplane sets share one environment)", "keep one")
            if name in PROCESS_ENV or name.startswith(RESERVED_ENV_PREFIX):
                raise InvalidJobArgs(f"{field}[{name!r}]", name, "is set by trainplane", "remove it")
            seen.add(name)


def _validate_identity(a: DistributedJobArgs) -> None:
    if a.service_account is not None:
        raise InvalidJobArgs("service_account", a.service_account, "with iam_role_arn the job creates its own "
                             "ServiceAccount for the role", "unset service_account, or bind the role to yours "
                             "and unset iam_role_arn")
    if a.iam_binding == access.POD_IDENTITY and a.eks_cluster_name is None:
        raise InvalidJobArgs("eks_cluster_name", None, "a pod identity association names its EKS cluster",
                             "set eks_cluster_name (the stack sets it on EKS), or use iam_binding irsa")


def _env_names(a: DistributedJobArgs) -> Optional[list[tuple[str, str]]]:
    """Every variable the platform fields set, with its field; ``None`` while any of them is an Output."""
    sources = {"env": a.env, "secret_env": a.secret_env, "secret_values": a.secret_values}
    if any(isinstance(v, pulumi.Output) for v in sources.values()):
        return None
    own = {"checkpoint_dir": [volumes.CHECKPOINT_DIR_ENV] if a.checkpoint_dir else [],
           "efa": list(fabric.EFA_ENV) if a.efa > 0 else []}
    plain = cast(dict[str, Iterable[str]], sources)  # none is an Output here
    return [(f, n) for f, names in {**plain, **own}.items() for n in names]


def platform_pod_spec(names: JobNames, args: DistributedJobArgs, spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` (a PodSpec whose ``containers[0]`` is the agent's) with the platform fields applied; a new dict,
    its lists Outputs where the fields are.

    Args:
        names: the job's names.
        args: the validated job arguments.
        spec: the PodSpec as the backend renders it (trainplane's own volumes and env already in it).
    """
    out = dict(spec)
    container = dict(spec["containers"][0])
    out["containers"] = [container, *spec["containers"][1:]]
    own_volumes = list(spec.get("volumes", []))

    def pod_volumes(given: Any, mounts: Any) -> list[dict[str, Any]]:
        volumes.check_storage(given, mounts, args.claims, args.checkpoint_dir, args.checkpoint_claim)
        return [*own_volumes, *volumes.pod_volumes(given, args.checkpoint_claim)]

    out["volumes"] = lift(pod_volumes, args.volumes, args.volume_mounts)
    own_mounts = list(container.get("volumeMounts", []))
    container["volumeMounts"] = lift(
        lambda given: [*own_mounts, *volumes.container_mounts(given, args.checkpoint_dir)], args.volume_mounts)
    own = [{"name": volumes.CHECKPOINT_DIR_ENV, "value": args.checkpoint_dir}] if args.checkpoint_dir else []
    own += [{"name": k, "value": v} for k, v in fabric.EFA_ENV.items()] if args.efa > 0 else []
    secret_names = lift(tuple, args.secret_values)  # the names only: they are no secret, the values stay out
    if isinstance(secret_names, pulumi.Output):
        secret_names = pulumi.Output.unsecret(secret_names)
    container["env"] = lift(
        lambda env, ref, values: [*env, *own, *access.secret_env_entries(names.job, ref, values)],
        container["env"], args.secret_env, secret_names)
    fabric.add_efa(container, args.efa)
    pull = lift(lambda given: [{"name": n} for n in given], args.image_pull_secrets)
    if isinstance(pull, pulumi.Output) or pull:
        out["imagePullSecrets"] = pull
    if args.iam_role_arn is not None:
        out["serviceAccountName"] = names.job
    if args.node_group is not None:
        out["nodeSelector"] = lift(lambda given: {**(given or {}), fabric.NODE_GROUP_LABEL: args.node_group},
                                   spec.get("nodeSelector", {}))
    return out


def pending_check(a: DistributedJobArgs) -> Optional[pulumi.Output[None]]:
    """The checks the job's resources wait for beyond each field's own (``None`` when there is none): the
    cross-field storage check of Output-valued ``volumes`` or ``volume_mounts`` (plain ones :func:`validate`
    checked), and that ``env`` holds no secret Output.

    The Output raises :class:`InvalidJobArgs` when the known values fail a check."""
    pending: list[Any] = []
    if any(isinstance(v, pulumi.Output) for v in (a.volumes, a.volume_mounts)):
        pending.append(pulumi.Output.all(a.volumes, a.volume_mounts).apply(
            lambda vm: volumes.check_storage(vm[0], vm[1], a.claims, a.checkpoint_dir, a.checkpoint_claim)))
    if isinstance(a.env, pulumi.Output):
        pending.append(pulumi.Output.from_input(_no_secret_in(a.env)))
    return pulumi.Output.all(*pending).apply(lambda _: None) if pending else None


async def _no_secret_in(env: pulumi.Output[Any]) -> None:
    """Refuse a secret Output in ``env``: its value would be a plain ``value`` in the pod template, readable by
    anyone who can read the pod, while Pulumi shows it as a secret."""
    if await env.is_secret():
        raise InvalidJobArgs("env", "[secret]", "holds a secret Output, whose value would sit in plain text in "
                             "the pod template", "pass it in secret_values (the job keeps it in a Secret of its "
                             "own) or read it from a Secret with secret_env")


def pod_annotations() -> dict[str, str]:
    """The platform's pod annotations (:data:`SAFE_TO_EVICT`)."""
    return {SAFE_TO_EVICT: "false"}


def platform_manifests(names: JobNames, args: DistributedJobArgs, labels: Labels) -> list[tuple[str, dict[str, Any]]]:
    """The objects the pods need before they start, as ``(role, body)``: the claims the job creates
    (``claim-<name>``), the ServiceAccount (``service-account``) and the ``secret_values`` Secret (``env``)."""
    out: list[tuple[str, dict[str, Any]]] = [
        (f"claim-{c['metadata']['name']}",
         volumes.claim_manifest(c, names.namespace, labels, {WAIT_FOR_ANNOTATION: CREATED}))
        for c in args.claims
    ]
    if args.iam_role_arn is not None:
        out.append(("service-account", access.service_account_manifest(
            names.job, names.namespace, labels, args.iam_role_arn, args.iam_binding)))
    if isinstance(args.secret_values, pulumi.Output) or args.secret_values:
        out.append(("env", access.env_secret_manifest(names.job, names.namespace, labels, args.secret_values)))
    return out


def pod_identity_association(resource_name: str, names: JobNames, args: DistributedJobArgs,
                             opts: pulumi.ResourceOptions) -> Optional[pulumi.CustomResource]:
    """With ``iam_binding="pod-identity"``, the EKS Pod Identity association of the job's role with its
    ServiceAccount (``aws.eks.PodIdentityAssociation``), else ``None``."""
    if args.iam_role_arn is None or args.iam_binding != access.POD_IDENTITY:
        return None
    import pulumi_aws as aws  # only a job that binds an IAM role talks to AWS

    return aws.eks.PodIdentityAssociation(
        resource_name, cluster_name=args.eks_cluster_name, namespace=names.namespace,
        service_account=names.job, role_arn=args.iam_role_arn, opts=opts)

