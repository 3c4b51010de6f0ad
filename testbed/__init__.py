"""What tests and benchmarks run agents with: never shipped to pods, never imported by the runtime.

``cluster``: real agent processes started one by one. ``lightweight``: many real agents in one OS
process that run no user processes. ``inprocess``: service-mode nodes whose calls run in the agent's
own process.
"""
