"""The job's life on a cluster: the requests a job needs (jobsets), whether the cluster can run it (readiness),
submit (submit, and its flow from preflight to --wait and --connect: deploy), state and progress summaries
(progress, status), waiting (wait), logs, connect's session (session, and its flow: attach) and diagnose. How
pwdeploy talks to the API server is ``pwdeploy.kube``."""
