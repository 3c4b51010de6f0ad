"""Local mode: a job's agents on this machine, one process per node, on loopback addresses.

``python -m runtime launch`` (:mod:`runtime.local.launch`: flags from the job spec, torchrun's options,
:mod:`runtime.local.torchrun_options`) and ``runtime.workflow.LocalCompute`` start jobs with
:func:`runtime.local.jobs.start`; torchrun's per-node command lines join at the rendezvous endpoint
(:mod:`runtime.local.hosts`, its HTTP and the agents' ``/info`` asked over ``json_http``). Ports are
planned and reserved across processes (``launch_plan``, ``reservation``), logs go to per-user directories
(``logdirs``), ``outcome`` says whose the exit code is, ``ray_defaults`` what each local node's
``ray start`` gets. Standard library only.
"""
