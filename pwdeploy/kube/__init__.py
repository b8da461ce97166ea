"""The Kubernetes seam: the API client (seam, and the HTTP client under it: http_client), its errors
(api_errors), how answers are read (answers), the resources pwdeploy asks for (resources), WebSocket streams
(websockets), port-forwarding (portforward) and finding the cluster from a kubeconfig (kubeconfig). Nothing here
knows what a Pathways job is."""
