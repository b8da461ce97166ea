"""Colocated-Python sidecar images: the Dockerfile, its inputs and their hash, the build engine, the lock file.

Layout: ``base`` resolves and checks the base image, ``inputs`` gathers the build context and hashes it,
``dockerfile`` renders the template, ``engine`` is the seam to a container engine (the docker CLI),
``build`` ties them together for ``pwdeploy sidecar build``, and ``lock`` records pushed digests for ``render``.
"""
