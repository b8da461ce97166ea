"""Which bucket permissions each location needs, and the smallest set of roles that grants missing ones."""

from __future__ import annotations

BUCKETS_GET = "storage.buckets.get"
BUCKETS_UPDATE = "storage.buckets.update"
OBJECTS_LIST = "storage.objects.list"
OBJECTS_CREATE = "storage.objects.create"
OBJECTS_GET = "storage.objects.get"
OBJECTS_DELETE = "storage.objects.delete"

OBJECT_ACCESS = (OBJECTS_CREATE, OBJECTS_GET, OBJECTS_LIST)
# The Pathways compile cache reads the bucket, sets its lifecycle (TTL) rule and reads/writes objects.
COMPILE_CACHE = (BUCKETS_GET, BUCKETS_UPDATE, OBJECTS_LIST, OBJECTS_CREATE, OBJECTS_GET)

# Orbax also deletes: checkpoints beyond the number it keeps, and what a killed save left behind.
CHECKPOINTS = (*OBJECT_ACCESS, OBJECTS_DELETE)

SCRATCH_FIELD = "storage.scratch"
CHECKPOINTS_FIELD = "storage.checkpoints"

# Predefined roles, in the order they are suggested, with the permissions (of ours) they grant.
ROLES: tuple[tuple[str, frozenset[str]], ...] = (
    ("roles/storage.legacyBucketOwner", frozenset({BUCKETS_GET, BUCKETS_UPDATE, OBJECTS_LIST, OBJECTS_CREATE})),
    ("roles/storage.objectAdmin", frozenset(CHECKPOINTS)),
    ("roles/storage.legacyBucketReader", frozenset({BUCKETS_GET, OBJECTS_LIST})),
)


def needed(field: str, *, enable_olm: bool) -> tuple[str, ...]:
    """The permissions the component that uses ``field`` needs on its bucket."""
    if field == CHECKPOINTS_FIELD:
        return CHECKPOINTS
    if field != SCRATCH_FIELD:
        return OBJECT_ACCESS
    return COMPILE_CACHE if enable_olm else tuple(p for p in COMPILE_CACHE if p != BUCKETS_UPDATE)


def roles_for(missing: set[str] | frozenset[str]) -> list[str]:
    """A few predefined roles that together grant ``missing`` (each suggested only if it adds something)."""
    chosen: list[str] = []
    left = set(missing)
    for role, grants in ROLES:
        # legacyBucketOwner is only worth it for buckets.update; the others cover the rest more narrowly.
        if role.endswith("legacyBucketOwner") and BUCKETS_UPDATE not in left:
            continue
        if left & grants:
            chosen.append(role)
            left -= grants
    return chosen
