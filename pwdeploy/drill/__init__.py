"""`pwdeploy drill`: one real fault injected into a running job and followed to its end. ``plan`` says which fault
and what the JobSet's failure policy predicts for it, ``inject`` makes the requests that inject it, ``follow``
measures what the controllers did, and ``verdict`` sets what was seen beside what was predicted."""
