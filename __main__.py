"""Pulumi program: stack config → cluster → add-ons → jobs, and the stack outputs."""

import pulumi

from components.stack import build_stack, parse_stack_config

outputs = build_stack(parse_stack_config(pulumi.Config().get))
pulumi.export("kubeconfig", outputs.kubeconfig)
pulumi.export("coordinatorUrls", outputs.coordinator_urls)
pulumi.export("tokens", pulumi.Output.secret(outputs.tokens))
