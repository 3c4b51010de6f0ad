"""What tests and benchmarks run agents with: never shipped to pods, never imported by the runtime.

``cluster``: real agent processes started one by one. ``lightweight``: many real agents in one OS
process that run no user processes. ``inprocess``: service-mode nodes whose calls run in the agent's
own process. ``fake_apiserver``: the stand-in API server of a port-forward; ``jobs``: a local service job
for the length of a block.
"""
