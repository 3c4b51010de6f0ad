"""Service mode: calls from a client fanned out to every rank, results merged in rank order, and the
long-lived worker processes that run them. Standard library only.
"""
