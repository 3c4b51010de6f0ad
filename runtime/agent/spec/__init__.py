"""What a job is: its settings, validated, read from and written to the agent's environment.

Standard library only (shipped to pods; the Pulumi components import it too).
"""
