"""HTTP between agents: the hand-parsed HTTP/1.1 server, the peer transport and name resolution.

Standard library only.
"""
