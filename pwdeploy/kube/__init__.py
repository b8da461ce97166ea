"""The Kubernetes seam: the API client (api), its errors (errors), how answers are read (answers), the resources
pwdeploy asks for (resources), WebSocket streams (websockets), port-forwarding (portforward) and finding the
cluster from a kubeconfig (kubeconfig). Nothing here knows what a Pathways job is."""
