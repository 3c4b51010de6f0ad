"""Running one node's share of a generation: user processes and framework daemons, their
environment, and what runs inside them before the user's code. Standard library only.
"""
