"""trainplane's runtime: the in-pod agent (``runtime.agent``), the local launcher and the client.

Importing this package needs the standard library only; httpx and kubernetes are imported by the
client-side modules alone.
"""
