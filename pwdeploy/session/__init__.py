"""A job's session through the API server's port-forward: a headless job's head and its proxy (``headless``), a
connect session's flow (``attach``: `pwdeploy connect` and `submit --connect`), and on-demand profiles of a running
job (``profiling``)."""
