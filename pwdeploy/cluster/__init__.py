"""Talking to a GKE cluster: the API seam (api), finding the cluster (connect), the requests a job needs
(jobsets), submit with its checks (submit), state and progress summaries (progress), waiting (wait) and logs."""
