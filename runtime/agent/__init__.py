"""The in-pod agent: rendezvous, ranks, the environment contract, process supervision.

Standard library only (Python 3.9+): this package is shipped to pods as a ConfigMap bundle and must
run on any image with a Python interpreter.
"""
