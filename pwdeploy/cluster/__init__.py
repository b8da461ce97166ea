"""Talking to a GKE cluster: the API seam (api), finding the cluster (connect), the requests a job needs
(jobsets), whether the cluster can run a job (readiness), submit (submit), state and progress summaries (progress),
waiting (wait) and logs."""
