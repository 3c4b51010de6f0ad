"""What a job is: its settings, validated, read from and written to the agent's environment, and its port
layout; and the formats the agent shares with its clients and front ends (its HTTP's rules, a call on the
wire, the job's statuses, the console's lines, a source tree as it travels, the cache-directory tag,
addresses).

Standard library only (shipped to pods; the Pulumi components, the client, the workflow API and local mode
import it too).
"""
