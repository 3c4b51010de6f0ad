"""How ``pulumi up`` waits for the objects the components create: pulumi-kubernetes' await annotations.

pulumi-kubernetes waits for a Job to complete and a StatefulSet to become ready (up to 10 minutes), and
treats a custom resource as ready at once. ``pulumi.com/waitFor`` replaces that with a condition of the
program's choosing (taking precedence over the built-in logic since pulumi-kubernetes 4.18.4, whose
CHANGELOG says so). trainplane never uses ``pulumi.com/skipAwait``: for a Job or a StatefulSet it also
skips awaiting the delete (pulumi/pulumi-kubernetes v4.32.0 ``provider/pkg/metadata/overrides.go``,
``allowsSkipAwaitWithDelete``), so replacing one races its Foreground delete and the re-Create fails with
AlreadyExists (``provider/pkg/await/await.go``, ``Creation``).
"""

from __future__ import annotations

WAIT_FOR_ANNOTATION = "pulumi.com/waitFor"
CREATED = "jsonpath={.metadata.uid}"
"""A ``pulumi.com/waitFor`` condition met as soon as the object exists."""
