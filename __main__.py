"""Pulumi program entrypoint: reads stack config and wires cluster, add-ons and jobs."""

raise SystemExit(
    "trainplane: no stack configured yet: the cluster and job components have not landed. "
    "Run a job locally with `python -m runtime launch --workers 2 --num-proc 2 examples/ddp_digits.py`."
)
