"""The OCI registry client: manifest look-ups and tag lists (client), the token flow (token_flow), docker's
credentials (credentials) and how answers are read (responses). Used by preflight and by the image builds."""
