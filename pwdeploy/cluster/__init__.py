"""The job's life on a cluster: the requests a job needs (jobsets), its nodes, submit (submit, and its flow from
preflight to --wait and --connect: deploy), state and progress summaries (progress, status), waiting (wait), logs,
the timeline and diagnose. How pwdeploy talks to the API server is ``pwdeploy.kube``; drills, the port-forward
session and the cluster's readiness have rooms of their own (``pwdeploy.drill``, ``pwdeploy.session``,
``pwdeploy.readiness``)."""
