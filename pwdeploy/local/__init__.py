"""`pwdeploy local run`: the job's own command on emulated CPU devices, with the cluster's env contract.

``flags`` sorts the config's XLA flags into those the CPU backend accepts and TPU-only ones, ``env`` builds
the child's environment (pure), and ``runner`` starts the child and passes its exit status through.
"""
