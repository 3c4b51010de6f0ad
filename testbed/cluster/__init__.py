"""An ephemeral Kubernetes on this machine for the tests: etcd, the API server, controller manager,
scheduler and kwok nodes, built from pinned Go modules (``python -m testbed.cluster build|up|down``)."""
