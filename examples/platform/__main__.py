"""One program, many jobs: a platform team's Pulumi program with trainplane.

It creates what a team's jobs share: a namespace, an image repository (ECR; its URL is the jobs' image
reference) and a service account. Then two jobs that take all of them from those resources' outputs: a
batch DDP job on scikit-learn's digits, and a service-mode job of the same image that users call (its
environment names the batch job, an output of the first job). Nothing here is a plain string the team
keeps in sync by hand: rename the namespace or the repository and every job follows.

A team that already has a repository its cluster pulls from names it in ``imageRepository`` instead
(``pulumi config set imageRepository registry.example.com/research/trainplane-examples``): then no ECR
repository is created and the program needs no AWS account.

Run with the Pulumi CLI, a cluster your kubeconfig reaches and (without ``imageRepository``) AWS
credentials; the jobs' pods pull ``<repository>:<imageTag>``, so push the examples image
(stacks/images/examples.Dockerfile) there first: ``cd examples/platform && pulumi stack init dev && pulumi up``.
"""

import sys
from pathlib import Path

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout; elsewhere, pip install trainplane

from components import DistributedJob, DistributedJobArgs

config = pulumi.Config()
tag = config.get("imageTag") or "digits"
repository = config.get("imageRepository") or aws.ecr.Repository("trainer-images", force_delete=True).repository_url

team = k8s.core.v1.Namespace("research", metadata={"name": "research"})
account = k8s.core.v1.ServiceAccount("trainer", metadata={"name": "trainer", "namespace": team.metadata.name})

shared = {
    "image": pulumi.Output.concat(repository, ":", tag),
    "namespace": team.metadata.name,
    "service_account": account.metadata.name,
    "labels": {"team": team.metadata.name},
    "working_dir": "/app",
    "cpus": 1,
    "memory": "2Gi",
}
train = DistributedJob("digits-ddp", DistributedJobArgs(
    script="examples/ddp_digits.py", args=["--epochs", "10"], workers=2, num_proc=2, distribution="pytorch",
    ttl_seconds_after_finished=3600, **shared))
serve = DistributedJob("digits-service", DistributedJobArgs(
    mode="service", pythonpath=["/app/examples"], workers=2, num_proc=1, env={"TRAINING_JOB": train.job_name},
    **shared))

pulumi.export("namespace", train.namespace)
pulumi.export("image", shared["image"])
pulumi.export("training_job", train.job_name)
pulumi.export("service_url", serve.coordinator_url)
pulumi.export("service_token", serve.token)
