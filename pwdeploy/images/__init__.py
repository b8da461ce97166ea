"""Container images pwdeploy builds: the colocated-Python sidecar and the job's own (main) container.

Two specs over one engine, one tag scheme and one lock format. ``template`` renders a Dockerfile template,
``inputs`` gathers a build context and hashes it (the hash is the tag; ``ignore`` reads a source folder's
``.dockerignore``), ``engine`` is the seam to a container
engine (the docker CLI), ``lock`` is the file that records pushed digests, ``build`` is the build/verify/push/record
flow both specs share. ``sidecar_image`` and ``job_image`` are the specs: each resolves its base, renders its
template and names its lock file (``wheel`` packs pwdeploy for job code that imports it). ``pin`` puts the recorded
digests into a job for ``render``. Imports run one way: specs -> build -> inputs -> lock; ``lock`` imports no other
module of this package.
"""
