"""Who is in the job: rendezvous and verdicts (the coordinator), heartbeats and liveness, the tree
that calls, world pushes and liveness travel. Standard library only.
"""
