"""`pwdeploy local run`: the job's own command on emulated CPU devices, with the cluster's env contract.

``flags`` sorts the config's XLA flags into those the CPU backend accepts and TPU-only ones, ``env`` builds
the child's environment (pure), ``runner`` runs the job once as the main process of a tree it owns (``tree``
finds, ends and reaps that tree; ``shm`` removes the /dev/shm files it left), ``restarts`` runs it again after
each death as the JobSet would, ``limits`` samples each run against the container's limits, and ``elastic``
checks the slice losses a run emulates in the job's process (``--lose-slice``) and reads back what the job reported.
``launch`` is the run from start to end (what the CLI and ``pwdeploy.api.run_local`` call), ``outcome`` the
``LocalRun`` it returns and the lines it tells once the job has ended.
"""
