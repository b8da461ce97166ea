"""The job's life on a cluster: the requests a job needs (jobsets), whether the cluster can run it (readiness),
submit (submit), state and progress summaries (progress, status), waiting (wait), logs, connect's session
(session) and diagnose. How pwdeploy talks to the API server is ``pwdeploy.kube``."""
