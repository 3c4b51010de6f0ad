"""``KindCluster``: a local Kubernetes cluster in Docker, created and deleted by the ``kind`` CLI."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s
import yaml
from pulumi_command import local

from components import validate

KIND_API_VERSION = "kind.x-k8s.io/v1alpha4"
"""The kind config API (sigs.k8s.io/kind pkg/apis/config/v1alpha4), decoded strictly by kind."""
KIND_WAIT = "180s"
"""How long ``kind create cluster --wait`` waits for the control plane to be Ready."""


def image_id_command(image: str) -> str:
    """The command printing a local Docker image's ID, which changes whenever the image is rebuilt."""
    return f"docker image inspect --format '{{{{.Id}}}}' {shlex.quote(image)}"


@dataclass(frozen=True)
class KindClusterArgs:
    """Settings of a kind cluster.

    Attributes:
        cluster_name: kind's name for the cluster (a DNS label); also the kubeconfig context
            ``kind-<cluster_name>``.
        workers: Worker nodes besides the control plane. With 0, the control plane runs pods.
        node_image: ``kindest/node`` image for every node; ``None`` uses the kind CLI's default.
        load_images: Local Docker images to copy onto every node after creation
            (``kind load docker-image``), so jobs can run images that are in no registry.

    Raises:
        ArgumentError: A field is invalid; the message names it, the value and the fix.
    """

    cluster_name: str = "trainplane"
    workers: int = 2
    node_image: Optional[str] = None
    load_images: Sequence[str] = ()

    def __post_init__(self) -> None:
        validate.dns_label("cluster_name", self.cluster_name)
        object.__setattr__(self, "load_images", validate.strings("load_images", self.load_images))
        validate.integer("workers", self.workers, minimum=0)
        if self.node_image is not None:
            validate.text("node_image", self.node_image)

    @property
    def gpu_nodes(self) -> bool:
        """Always False: kind nodes expose no GPUs here."""
        return False


def kind_config(args: KindClusterArgs) -> dict[str, Any]:
    """Render the kind ``Cluster`` config: one control-plane node and ``args.workers`` workers.

    Args:
        args: The cluster settings.

    Returns:
        The config as a plain dict, ready for ``kind create cluster --config``.
    """
    image = {"image": args.node_image} if args.node_image else {}
    nodes = [{"role": "control-plane", **image}] + [{"role": "worker", **image} for _ in range(args.workers)]
    return {"kind": "Cluster", "apiVersion": KIND_API_VERSION, "name": args.cluster_name, "nodes": nodes}


class KindCluster(pulumi.ComponentResource):
    """A kind cluster on the machine running ``pulumi up`` (needs the ``kind`` CLI and Docker).

    ``kind create cluster`` runs on create, ``kind delete cluster`` on destroy; a changed config
    replaces the cluster. The kubeconfig is read back with ``kind get kubeconfig``, and the
    ``load_images`` are copied in with ``kind load docker-image``, again whenever an image's ID
    changes: every preview and update reads the local images' IDs (``docker image inspect``), so a
    rebuilt image of the same name reaches the nodes on the next ``pulumi up``. Pods started after that
    run it (running pods keep the image they started with).

    Attributes:
        provider: Kubernetes provider for the cluster.
        kubeconfig: The cluster's kubeconfig (secret).
        gpu_nodes: Always ``False``: kind nodes expose no GPUs here.
    """

    def __init__(
        self, name: str, args: KindClusterArgs, opts: Optional[pulumi.ResourceOptions] = None
    ) -> None:
        super().__init__("trainplane:cluster:KindCluster", name, None, opts)
        self.gpu_nodes = args.gpu_nodes
        config = yaml.safe_dump(kind_config(args), sort_keys=False)
        cluster = shlex.quote(args.cluster_name)
        create = local.Command(
            f"{name}-create",
            create=f"kind create cluster --name {cluster} --config=- --wait {KIND_WAIT}",
            delete=f"kind delete cluster --name {cluster}",
            stdin=config,
            triggers=[config],
            opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True),
        )
        read = local.Command(
            f"{name}-kubeconfig",
            create=f"kind get kubeconfig --name {cluster}",
            triggers=[create.id],
            logging=local.Logging.NONE,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[create], additional_secret_outputs=["stdout"]
            ),
        )
        for i, image in enumerate(args.load_images):
            image_id = local.run_output(command=image_id_command(image)).stdout
            local.Command(
                f"{name}-load-{i}",
                create=f"kind load docker-image {shlex.quote(image)} --name {cluster}",
                triggers=[create.id, image, image_id],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[create]),
            )
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(read.stdout)
        self.provider = k8s.Provider(
            f"{name}-provider", kubeconfig=self.kubeconfig, opts=pulumi.ResourceOptions(parent=self)
        )
        self.register_outputs({"kubeconfig": self.kubeconfig})
