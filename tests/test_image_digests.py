"""The per-folder digest cache (pwdeploy.images.digests) that spares render from reading an unchanged job folder:
a changed file is never missed (content rewritten in place with its mtime put back, a file replaced by another
of the same size and mtime, git's racy case), a damaged cache is ignored and rewritten, and render still refuses
a stale pin."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pwdeploy.errors import ConfigError
from pwdeploy.images import digests, ignore, inputs, lock, pin, source_folder
from pwdeploy.images import job_image as spec
from tests.test_image import REPOSITORY, job_at, write_job

CACHE = Path(digests.STATE_DIR, digests.CACHE_NAME)
WALK = Path(digests.STATE_DIR, digests.WALK_NAME)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the files the cache reads (hashes), in order."""
    found: list[str] = []
    read = digests._read_facts

    def counting(path: str) -> digests.FileFacts:
        found.append(os.path.basename(path))
        return read(path)

    monkeypatch.setattr(digests, "_read_facts", counting)
    return found


def _folder(root: Path, files: int = 3) -> Path:
    for index in range(files):
        (root / "data").mkdir(parents=True, exist_ok=True)
        (root / "data" / f"f{index}.bin").write_bytes(bytes([index]) * 100)
    (root / "train.py").write_text("import pwdeploy.runtime\n")
    _settle(root)
    return root


def _settle(root: Path) -> None:
    """Wait until the file system's clock has passed the last change of every file under ``root`` (a few ms at
    most: ctime follows a coarse clock), so none of them is "racy" for the next look at the folder."""
    newest = max(path.stat().st_ctime_ns for path in root.rglob("*") if path.is_file())
    probe = root / digests.STATE_DIR / "clock"  # never part of the folder's files
    probe.parent.mkdir(exist_ok=True)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        probe.write_bytes(b"")
        if probe.stat().st_mtime_ns > newest:
            break
        time.sleep(0.001)
    probe.unlink()


def _digests(root: Path) -> dict[str, str]:
    return {item.name: str(item.digest) for item in source_folder.scan(root, "image.source_dir", "code").files()}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_unchanged_folder_is_not_read_again(tmp_path: Path, reads: list[str]) -> None:
    root = _folder(tmp_path)
    first = _digests(root)
    assert sorted(reads) == ["f0.bin", "f1.bin", "f2.bin", "train.py"]
    assert first["code/data/f1.bin"] == _sha(root / "data" / "f1.bin")
    assert (root / CACHE).is_file()
    reads.clear()
    assert _digests(root) == first and reads == []


def test_content_rewritten_in_place_with_the_mtime_put_back_is_read_again(tmp_path: Path, reads: list[str]) -> None:
    """Same size, same inode, same mtime (os.utime): only ctime shows the write, and the cache compares it."""
    root = _folder(tmp_path)
    _digests(root)
    target = root / "data" / "f1.bin"
    before = target.stat()
    with target.open("r+b") as handle:
        handle.write(b"\xff" * 100)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = target.stat()
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    reads.clear()
    assert _digests(root)["code/data/f1.bin"] == _sha(target) == hashlib.sha256(b"\xff" * 100).hexdigest()
    assert reads == ["f1.bin"]


def test_a_file_replaced_by_another_of_the_same_size_and_mtime_is_read_again(tmp_path: Path, reads: list[str]) -> None:
    root = _folder(tmp_path)
    _digests(root)
    target = root / "data" / "f2.bin"
    before = target.stat()
    replacement = root / "replacement"
    replacement.write_bytes(b"\x07" * 100)
    os.utime(replacement, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(replacement, target)  # what an editor's "safe write" does: a new inode
    reads.clear()
    assert _digests(root)["code/data/f2.bin"] == hashlib.sha256(b"\x07" * 100).hexdigest()
    assert reads == ["f2.bin"]


def test_a_racy_file_is_not_cached_so_a_change_in_the_same_tick_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reads: list[str]
) -> None:
    """git's racy case, on a file system whose clock ticks coarsely: the file was changed in the tick the run
    began reading, then changed again within that tick, so every stamp is the same. The first run must not have
    cached it."""
    root = _folder(tmp_path)  # the other files: changed before that tick
    target = root / "data" / "f0.bin"
    target.write_bytes(b"\x08" * 100)
    status = target.stat()
    tick = max(status.st_mtime_ns, status.st_ctime_ns)
    take_stamp = digests.DigestCache._take_stamp

    def stamp_in_that_tick(cache: digests.DigestCache) -> int:
        take_stamp(cache)  # makes .pwdeploy/, as the real stamp does
        return tick

    monkeypatch.setattr(digests.DigestCache, "_take_stamp", stamp_in_that_tick)
    _digests(root)
    cached = json.loads((root / CACHE).read_text())["files"]
    assert "data/f0.bin" not in cached and "data/f1.bin" in cached  # f1 was last changed before that tick
    # Changed again in the same tick: stamps cannot show it. Stand in for it by giving the new content the old
    # stamps (os.stat reports them), as a coarse clock would.
    target.write_bytes(b"\x09" * 100)
    real_lstat = os.lstat
    same = os.stat_result(tuple(status), {"st_mtime_ns": status.st_mtime_ns, "st_ctime_ns": status.st_ctime_ns})

    stood_in: list[str] = []

    def stamps_of_before(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:  # the walk: lstat(name, dir_fd)
        if os.fspath(path) != "f0.bin":
            return real_lstat(path, *args, **kwargs)
        stood_in.append("f0.bin")
        return same

    monkeypatch.setattr(os, "lstat", stamps_of_before)
    reads.clear()
    assert _digests(root)["code/data/f0.bin"] == hashlib.sha256(b"\x09" * 100).hexdigest()
    assert reads == ["f0.bin"] and stood_in  # read again although the walk saw the old stamps


@pytest.mark.parametrize(
    "damage",
    [
        "not json",
        '{"format": 99, "files": {}}',
        '{"format": 1, "files": []}',
        '{"format": 1, "files": {"train.py": [1, 2, 3, 4, "zz", 0], "data/f0.bin": "x"}}',
        "[" * 100_000 + "]" * 100_000,  # deeper than json can parse: RecursionError
        '{"format": 1, "files": ' + '{"a": ' * 100_000 + "0" + "}" * 100_001,
    ],
    ids=["not-json", "format", "files-list", "entries", "arrays-100000-deep", "objects-100000-deep"],
)
def test_a_damaged_cache_is_ignored_and_rewritten(tmp_path: Path, damage: str, reads: list[str]) -> None:
    root = _folder(tmp_path)
    expected = _digests(root)
    (root / CACHE).write_text(damage)
    (root / WALK).unlink()  # else the record of the unchanged walk answers without a look at the cache
    reads.clear()
    assert _digests(root) == expected and len(reads) == 4
    assert json.loads((root / CACHE).read_text())["format"] == digests.FORMAT
    reads.clear()
    assert _digests(root) == expected and reads == []


def test_an_entry_with_a_made_up_digest_of_the_wrong_shape_is_read_again(tmp_path: Path, reads: list[str]) -> None:
    root = _folder(tmp_path)
    expected = _digests(root)
    data = json.loads((root / CACHE).read_text())
    entry = data["files"]["train.py"]  # the stamps (64 hex digits), the sha256 hex, the flags digit
    data["files"]["train.py"] = entry[:64] + "not a digest" + "0" * 52 + entry[-1]
    (root / CACHE).write_text(json.dumps(data))
    (root / WALK).unlink()  # else the record of the unchanged walk answers without a look at the entry
    reads.clear()
    assert _digests(root) == expected and reads == ["train.py"]


@pytest.mark.parametrize(
    "bad",
    [
        ["stamps", "digest", 1],  # the shape of another format
        {"nested": [[["deep"]]]},
        12,
        None,
        "",
        "short",
        "{stamps}{digest}",  # no flags digit
        "{stamps}{digest}4",  # a flags digit out of range
        "{stamps}{digest}1 ",
        "{stamps}{digest_63}g1",
        "{stamps}{digest_60}  {digest_2}1",  # 31 bytes: bytes.fromhex skips the spaces
        "{stamps}\udc80{digest_63}1",  # a lone surrogate, which no file's digest can hold
        "{other_stamps}{digest}1",
        "{stamps}{digest_upper}1",  # the digest is written in lower case: anything else was not written by pwdeploy
    ],
)
def test_an_entry_of_the_wrong_shape_is_read_again_and_only_it(tmp_path: Path, bad: object, reads: list[str]) -> None:
    """A hostile or damaged entry is only a file read again: the lookups never fail, the other entries count."""
    root = _folder(tmp_path)
    expected = _digests(root)
    data = json.loads((root / CACHE).read_text())
    entry = data["files"]["train.py"]
    if isinstance(bad, str):
        digest = entry[64:128]
        values = {
            "stamps": entry[:64],
            "other_stamps": "0" * 64,
            "digest": digest,
            "digest_63": digest[1:],
            "digest_upper": digest.upper(),
        }
        bad = bad.format(digest_60=digest[:60], digest_2=digest[60:62], **values)
    data["files"]["train.py"] = bad
    (root / CACHE).write_text(json.dumps(data))
    (root / WALK).unlink()
    reads.clear()
    assert _digests(root) == expected and reads == ["train.py"]
    reads.clear()
    assert _digests(root) == expected and reads == [], "the entry was rewritten"


def test_the_cache_is_never_part_of_the_build_context(tmp_path: Path) -> None:
    root = _folder(tmp_path)
    _digests(root)
    names = set(_digests(root))
    assert (root / CACHE).is_file() and not any(digests.STATE_DIR in name for name in names)
    assert names == {"code/data/f0.bin", "code/data/f1.bin", "code/data/f2.bin", "code/train.py"}


def test_which_python_files_import_pwdeploy_is_cached_too(tmp_path: Path, reads: list[str]) -> None:
    """Only .py files are searched for `import pwdeploy` (pwdeploy.images.job_image adds the wheel for them)."""
    root = _folder(tmp_path)
    (root / "notes.txt").write_text("import pwdeploy\n")
    (root / "util.py").write_text("def f():\n    from pwdeploy import runtime\n")
    _settle(root)
    first = {item.name: item.imports_pwdeploy for item in source_folder.scan(root, "f", "code").files()}
    assert first["code/train.py"] and first["code/util.py"] and not first["code/notes.txt"]
    reads.clear()
    again = {item.name: item.imports_pwdeploy for item in source_folder.scan(root, "f", "code").files()}
    assert again == first and reads == []


def test_render_refuses_a_stale_pin_after_an_in_place_edit_that_keeps_size_and_mtime(
    tmp_path: Path, reads: list[str]
) -> None:
    path = write_job(tmp_path, {"repository": REPOSITORY}, code="from pwdeploy import runtime\nSTEPS = 1\n")
    _settle(tmp_path)
    job = job_at(path)
    found = spec.collect(job, path)
    lock.record(spec.lock_path(job), job.name, found.lock_entry(REPOSITORY, "sha256:" + "d" * 64))
    reads.clear()
    assert pin.pin_pushed(job_at(path), path)[0].main.image == f"{REPOSITORY}@sha256:{'d' * 64}"
    assert reads == [], "the second look at the folder reads nothing"
    code = tmp_path / "train.py"
    before = code.stat()
    code.write_text("from pwdeploy import runtime\nSTEPS = 2\n")  # same size
    os.utime(code, ns=(before.st_atime_ns, before.st_mtime_ns))
    pinned, warnings = pin.pin_pushed(job_at(path), path)
    assert pinned.main.image is None and "changed since" in warnings[0]
    assert reads == ["train.py"]


def test_a_folder_whose_cache_cannot_be_written_is_read_in_full_each_time(tmp_path: Path, reads: list[str]) -> None:
    """`.pwdeploy` here is a file, so no cache can be made beside the files (as in a folder one may not write)."""
    root = _folder(tmp_path)
    shutil.rmtree(root / digests.STATE_DIR)  # the clock probe's
    (root / digests.STATE_DIR).write_text("not a folder")
    expected = _digests(root)
    assert expected["code/data/f0.bin"] == _sha(root / "data" / "f0.bin")
    assert sorted(reads) == [".pwdeploy", "f0.bin", "f1.bin", "f2.bin", "train.py"]  # that file is copied too
    reads.clear()
    assert _digests(root) == expected and len(reads) == 5
    assert (root / digests.STATE_DIR).read_text() == "not a folder"


def test_names_that_look_like_credentials_are_judged_once_and_warned_about_each_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verdict on a file's name is kept in its entry: an unchanged folder warns the same without a match."""
    judged: list[str] = []
    judge = ignore.looks_like_credentials

    def counting(relative: str) -> bool:
        judged.append(relative)
        return judge(relative)

    monkeypatch.setattr(digests, "looks_like_credentials", counting)
    root = _folder(tmp_path)
    (root / "keys").mkdir()
    (root / "keys" / "sa-key.json").write_text("{}")
    (root / ".env").write_text("TOKEN=x\n")
    _settle(root)

    def warnings() -> tuple[str, ...]:
        return source_folder.scan(root, "f", "code").credential_warnings("f")

    first = warnings()
    assert len(first) == 1 and first[0].startswith(f"f {root}: .env, keys/sa-key.json look like credentials")
    assert sorted(judged) == [".env", "data/f0.bin", "data/f1.bin", "data/f2.bin", "keys/sa-key.json", "train.py"]
    judged.clear()
    assert warnings() == first and judged == []
    (root / "id_rsa").write_text("x")
    _settle(root)
    assert ".env, id_rsa, keys/sa-key.json look like credentials" in warnings()[0] and judged == ["id_rsa"]


def test_a_cache_of_the_previous_format_is_read_again_and_rewritten(tmp_path: Path, reads: list[str]) -> None:
    """Format 1 kept [size, mtime_ns, ctime_ns, inode, sha256, imports] lists and no verdict on the names."""
    root = _folder(tmp_path)
    expected = _digests(root)
    files = {}
    for name in ("data/f0.bin", "data/f1.bin", "data/f2.bin", "train.py"):
        status = (root / name).stat()
        stamps = [status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino]
        files[name] = [*stamps, expected[f"code/{name}"], int(name == "train.py")]
    (root / CACHE).write_text(json.dumps({"format": 1, "files": files}))
    (root / WALK).unlink()
    reads.clear()
    assert _digests(root) == expected and len(reads) == 4
    assert json.loads((root / CACHE).read_text())["format"] == digests.FORMAT


def test_a_file_dated_past_what_64_bits_of_nanoseconds_hold_is_read_each_time(tmp_path: Path, reads: list[str]) -> None:
    root = _folder(tmp_path)
    target = root / "data" / "f1.bin"
    year_2300 = 10_413_792_000 * 10**9  # ns, over 2**63
    os.utime(target, ns=(year_2300, year_2300))
    if target.stat().st_mtime_ns < 2**63:
        pytest.skip(f"the file system of {tmp_path} cannot date a file in 2300")
    _settle(root)
    expected = _digests(root)
    assert expected["code/data/f1.bin"] == _sha(target)
    reads.clear()
    assert _digests(root) == expected and reads == ["f1.bin"]
    assert "data/f1.bin" not in json.loads((root / CACHE).read_text())["files"]


@pytest.mark.parametrize(
    ("ref", "lines", "digest"),
    [
        ("reg.example/team/app:v1", ["v1: digest: sha256:" + "a" * 64 + " size: 1234"], "sha256:" + "a" * 64),
        ("reg.example:5000/app:v1", ["v1: digest: sha256:" + "a" * 64 + " size: 9", "v2: digest: sha256:" + "b" * 64
         + " size: 9"], "sha256:" + "a" * 64),
        ("reg.example:5000/app", ["latest: digest: sha256:" + "c" * 64 + " size: 9"], "sha256:" + "c" * 64),
        ("reg.example/app:v1", ["v2: digest: sha256:" + "b" * 64 + " size: 9"], None),
        ("reg.example/app:v1", ["echo v1: digest: sha256:" + "b" * 64 + " size: 9"], None),
        ("reg.example/app:v1", ["v1: digest: sha256:" + "b" * 63 + " size: 9"], None),
    ],
)  # fmt: skip
def test_the_pushed_digest_is_the_one_of_the_tag_pushed(ref: str, lines: list[str], digest: str | None) -> None:
    from pwdeploy.images.engine import pushed_digest

    assert pushed_digest(ref, lines) == digest


def test_an_unchanged_folder_comes_from_the_record_of_its_last_walk_without_an_entry_looked_up(
    tmp_path: Path, reads: list[str]
) -> None:
    """Render of a pinned job walks the whole folder: when it is as the last walk left it (the same files, each
    with the same stamps), the record of that walk answers; the per-file entries are not even parsed."""
    root = _folder(tmp_path)
    expected = _digests(root)
    record = (root / WALK).read_bytes()
    assert record.startswith(b"pwdeploy-walk " + digests.FORMAT.encode())
    assert record.endswith("".join(expected[f"code/{name}"] + flag for name, flag in _FILES).encode())
    (root / CACHE).write_text("not json: never read while the record holds")
    reads.clear()
    assert _digests(root) == expected and reads == []


_FILES = [("train.py", "1"), ("data/f0.bin", "0"), ("data/f1.bin", "0"), ("data/f2.bin", "0")]  # in the walk's order


def _facts_at(record: bytes) -> int:
    return len(record) - len(_FILES) * digests.FACTS


@pytest.mark.parametrize(
    "damage",
    [
        lambda record: record[:-1],  # a file's facts short
        lambda record: record + b"0",
        lambda record: record[: _facts_at(record)] + record[_facts_at(record) :].upper(),
        lambda record: record[:-1] + b"9",  # a flags digit out of range
        lambda record: record[: _facts_at(record) + 10] + b" " + record[_facts_at(record) + 11 :],
        lambda record: record[: _facts_at(record) + 10] + b"\xff" + record[_facts_at(record) + 11 :],
        lambda record: record.replace(b"train.py", b"train.pz"),  # the walk of another folder
        lambda record: record.replace(digests.FORMAT.encode(), b"2-" + b"0" * 16),  # judged by other rules
        lambda record: record.replace(b"\n", b" ", 1),
        lambda record: record.replace(digests.FORMAT.encode() + b" ", digests.FORMAT.encode() + b" zz", 1),  # the id
        lambda record: record.replace(b" ", b" 1", 2),  # the length of the walk's part
        lambda record: b"",
        lambda record: b"\0" * 10_000,
    ],
    ids=[
        "short",
        "long",
        "upper",
        "flags",
        "space",
        "byte",
        "names",
        "format",
        "header",
        "id",
        "length",
        "empty",
        "zeros",
    ],
)
def test_a_damaged_record_of_the_last_walk_falls_back_to_the_entries(
    tmp_path: Path, damage: Callable[[bytes], bytes], reads: list[str]
) -> None:
    root = _folder(tmp_path)
    expected = _digests(root)
    good = (root / WALK).read_bytes()
    (root / WALK).write_bytes(damage(good))
    reads.clear()
    assert _digests(root) == expected and reads == []  # every entry still holds
    assert _less_id((root / WALK).read_bytes()) == _less_id(good), "the record is written again (with another id)"


def _less_id(record: bytes) -> bytes:
    start = len(b"pwdeploy-walk " + digests.FORMAT.encode() + b" ")
    return record[:start] + record[start + 16 :]


def test_a_changed_file_changes_the_walk_and_only_it_is_read_again(tmp_path: Path, reads: list[str]) -> None:
    root = _folder(tmp_path)
    _digests(root)
    before = (root / WALK).read_bytes()
    (root / "data" / "f1.bin").write_bytes(b"other")
    _settle(root)
    reads.clear()
    assert _digests(root)["code/data/f1.bin"] == _sha(root / "data" / "f1.bin") and reads == ["f1.bin"]
    assert (root / WALK).read_bytes() != before
    reads.clear()
    _digests(root)
    assert reads == []


def test_a_walk_with_a_racy_file_is_not_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record stands for every file's facts: a file whose last change is as new as the run's stamp has no entry,
    so neither has the walk (the next run looks again), and the record of an earlier walk is removed."""
    root = _folder(tmp_path)
    _digests(root)
    assert (root / WALK).is_file()
    (root / "data" / "f0.bin").write_bytes(b"new")  # changed now: the stamp the run takes is not past it
    monkeypatch.setattr(digests.DigestCache, "_take_stamp", lambda cache: os.stat(root / "data" / "f0.bin").st_ctime_ns)
    _digests(root)
    data = json.loads((root / CACHE).read_text())
    assert "data/f0.bin" not in data["files"] and not (root / WALK).exists()


def test_a_cache_that_holds_the_record_of_the_earlier_layout_is_rewritten_without_it(
    tmp_path: Path, reads: list[str]
) -> None:
    """The record of the last walk was a "walk" key of the cache: a cache written so keeps its entries (nothing is
    read again) and loses the key, which would only cost parsing."""
    root = _folder(tmp_path)
    expected = _digests(root)
    data = json.loads((root / CACHE).read_text())
    (root / CACHE).write_text(json.dumps({**data, "walk": {"key": "0" * 64, "facts": ""}}))
    (root / WALK).unlink()
    reads.clear()
    assert _digests(root) == expected and reads == []
    assert json.loads((root / CACHE).read_text()) == data and (root / WALK).is_file()


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded-wheel", "wheel-built"])
def test_the_pin_check_hashes_the_inputs_as_the_build_does_and_as_they_always_were(
    tmp_path: Path, recorded: bool
) -> None:
    """Render checks a pin with ``inputs_hash``, which takes the folder whole instead of a context file per file:
    it gives the hash ``collect`` gives, and that is the hash as written down here from the files themselves (the
    platform, the Dockerfile without its hash label, then each file's path, execute bit and sha256), so images
    pushed by earlier versions still pin."""
    path = write_job(tmp_path, {"repository": REPOSITORY, "requirements": "requirements.txt"})
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "run.sh").chmod(0o755)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "sa-key.json").write_text("{}")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("é")
    _settle(tmp_path)
    job = job_at(path)
    built = lock.BuiltWith("3.11", "0.4.0", "0.1.13", "e" * 64) if recorded else None
    machine = lock.BuiltWith("3.11", "0.4.0", "0.1.13")
    found = spec.collect(job, path, built_with=built, machine=machine)
    assert spec.inputs_hash(job, path, built_with=built, machine=machine) == found.inputs_hash
    assert spec.inputs_hash(job, path, built_with=built, machine=machine) == found.inputs_hash, "from the record"
    reference = hashlib.sha256(b"platform\0linux/amd64\0")
    reference.update(b"Dockerfile\0" + found.dockerfile.replace(found.inputs_hash, "").encode() + b"\0")
    names = ["requirements.txt", "code/requirements.txt", "code/run.sh", "code/train.py"]  # the folder's, the config
    names += ["code/keys/sa-key.json", "code/notes/a.txt"]  # left out; then its subfolders'
    assert [item.name for item in found.files[:-1]] == names and found.files[-1].name.endswith(".whl")
    for item in found.files:
        content = item.read() if item.digest is None else None
        sha = item.digest if content is None else hashlib.sha256(content).hexdigest()
        if not item.name.endswith(".whl"):
            assert sha == hashlib.sha256((tmp_path / item.name.removeprefix("code/")).read_bytes()).hexdigest()
        reference.update(f"{item.name}\0{'x' if item.name == 'code/run.sh' else '-'}\0{sha}\0".encode())
    assert found.inputs_hash == reference.hexdigest()
    assert found.warnings and "keys/sa-key.json look like credentials" in found.warnings[0]


def _pin_hash(path: Path, **image: Any) -> str:
    job = job_at(path)
    job = job._replace(image=job.image._replace(**image))
    return spec.inputs_hash(job, path, built_with=lock.BuiltWith("3.11", "0.4.0", "0.1.13", "e" * 64))


def _build_hash(path: Path, **image: Any) -> str:
    job = job_at(path)
    job = job._replace(image=job.image._replace(**image))
    return spec.collect(job, path, built_with=lock.BuiltWith("3.11", "0.4.0", "0.1.13", "e" * 64)).inputs_hash


def test_the_hash_of_an_unchanged_walk_is_kept_and_each_other_input_gets_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the folder as its record says, the hash is not computed again from every file's line; a change of any
    other input (here pip_args, in the Dockerfile) misses the kept one; a damaged file of kept hashes costs only the
    computing."""
    path = write_job(tmp_path, {"repository": REPOSITORY})
    _settle(tmp_path)
    joined: list[str] = []
    hash_lines = inputs.Folder.hash_lines

    def counting(folder: inputs.Folder) -> bytes:
        joined.append(folder.prefix)
        return hash_lines(folder)

    monkeypatch.setattr(inputs.Folder, "hash_lines", counting)
    first = _pin_hash(path)
    assert first == _build_hash(path) and joined == ["code"]  # the first walk: recorded, then computed and kept
    joined.clear()
    assert _pin_hash(path) == first and joined == []
    other = _pin_hash(path, pip_args=("--pre",))
    assert other != first and other == _build_hash(path, pip_args=("--pre",)) and joined == ["code"]
    joined.clear()
    assert _pin_hash(path) == first and _pin_hash(path, pip_args=("--pre",)) == other and joined == []
    kept = tmp_path / digests.STATE_DIR / digests.HASHES_NAME
    for damage in (
        "",
        "x y z\n",
        kept.read_text().replace(first, "z" * 64),
        kept.read_text().replace(first, "0"),
        "\xff",
    ):
        kept.write_text(damage)
        joined.clear()
        assert _pin_hash(path) == first and joined == ["code"]


def test_a_file_made_executable_changes_the_hash_though_its_content_does_not(tmp_path: Path) -> None:
    """The execute bit is part of the inputs hash (the image's file mode): a chmod alone is seen (it moves the ctime
    the stamps hold, and the record of the walk holds each file's mode too), not answered from the hash kept for
    the walk before."""
    path = write_job(tmp_path, {"repository": REPOSITORY})
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    _settle(tmp_path)
    before = _pin_hash(path)
    assert _pin_hash(path) == before
    (tmp_path / "run.sh").chmod(0o755)
    _settle(tmp_path)
    after = _pin_hash(path)
    assert after != before and after == _build_hash(path) and _pin_hash(path) == after


def test_a_file_dated_past_64_bits_after_the_skipped_config_keeps_its_own_stamps(tmp_path: Path) -> None:
    """The walk packs each file's stamps, keeps those too large to pack aside by index, and drops the config file
    (``skip``) by index: a file after the config must keep its own stamps and mode (its execute bit here)."""
    root = _folder(tmp_path)
    (root / "job.yaml").write_text("name: x\n")
    late = root / "zz.sh"
    late.write_text("#!/bin/sh\n")
    late.chmod(0o755)
    year_2300 = 10_413_792_000 * 10**9
    os.utime(late, ns=(year_2300, year_2300))
    if late.stat().st_mtime_ns < 2**63:
        pytest.skip(f"the file system of {tmp_path} cannot date a file in 2300")
    _settle(root)
    found = source_folder.scan(root, "f", "code", skip=frozenset({(root / "job.yaml").resolve()}))
    files = {item.name: item for item in found.files()}
    assert "code/job.yaml" not in files and files["code/zz.sh"].executable
    assert files["code/zz.sh"].digest == _sha(late) and not files["code/train.py"].executable


def test_the_walk_takes_the_same_files_whether_a_folder_is_plain_or_holds_odd_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder of plain files and subfolders goes through the walk's C loops; one holding a dangling link, a FIFO,
    compiled Python, a lock file or a link to a folder, and every folder once a .dockerignore has rules, is judged
    entry by entry. Both give the regular files kept, in name order, then the subfolders' (less __pycache__ and the
    like), each with its own digest and execute bit."""
    root = tmp_path / "job"
    for folder in ("plain", "odd"):
        (root / folder / "sub").mkdir(parents=True)
        (root / folder / "__pycache__").mkdir()
        (root / folder / "__pycache__" / "c.cpython-311.opt-1.txt").write_text("not copied\n")
        for name in ("b.txt", "a.sh", "c.py", "sub/d.txt"):
            (root / folder / name).write_text(f"{folder}/{name}\n")
        (root / folder / "a.sh").chmod(0o755)
    (root / "odd" / "folder-link").symlink_to(root / "plain" / "sub")
    (root / "odd" / "gone").symlink_to(root / "nowhere")
    os.mkfifo(root / "odd" / "pipe")
    (root / "odd" / "x.pyc").write_bytes(b"\0")
    (root / "odd" / "pwdeploy-image.lock").write_text("{}")
    (root / "odd" / "skip.me").write_text("left out\n")
    (root / "odd" / "link.txt").symlink_to("b.txt")
    _settle(root)
    one_by_one = source_folder._one_by_one
    judged: list[str] = []

    def judging(folder: int, at: str, *args: Any) -> Any:
        judged.append(at)
        return one_by_one(folder, at, *args)

    monkeypatch.setattr(source_folder, "_one_by_one", judging)
    expected = [
        f"code/{folder}/{name}"
        for folder in ("odd", "plain")
        for name in ("a.sh", "b.txt", "c.py", "skip.me", "sub/d.txt")
        if (folder, name) != ("plain", "skip.me")
    ]
    expected.insert(3, "code/odd/link.txt")
    for ignored in ("", "odd/skip.me\n"):
        if ignored:
            (root / ".dockerignore").write_text(ignored)
            expected = ["code/.dockerignore", *(name for name in expected if name != "code/odd/skip.me")]
        judged.clear()
        found = {item.name: item for item in source_folder.scan(root, "f", "code").files()}
        assert list(found) == expected
        for name, item in found.items():
            path = root / name.removeprefix("code/")
            assert item.digest == _sha(path) and item.executable == name.endswith(".sh")
        assert judged == (["", "odd/", "odd/sub/", "plain/", "plain/sub/"] if ignored else ["odd/"])


def test_a_file_name_that_is_not_utf8_is_refused_by_name_unless_left_out(tmp_path: Path) -> None:
    """The inputs hash and the build context hold each file's name as UTF-8: a name of other bytes was an internal
    error (UnicodeEncodeError) inside the hash; it is a config error naming the file, and .dockerignore can leave
    it out."""
    root = _folder(tmp_path)
    (root / "data").joinpath(os.fsdecode(b"caf\xe9.txt")).write_text("latin-1 name\n")
    with pytest.raises(ConfigError) as caught:
        source_folder.scan(root, "image.source_dir", "code")
    assert caught.value.field == "image.source_dir" and "data/caf\\xe9.txt" in caught.value.message
    assert "not UTF-8" in caught.value.message and ".dockerignore" in str(caught.value.hint)
    (root / ".dockerignore").write_text("data/caf?.txt\n")
    assert "code/data/f0.bin" in {item.name for item in source_folder.scan(root, "image.source_dir", "code").files()}


def test_a_file_that_cannot_be_read_is_a_config_error_naming_it_read_refused_by_a_stand_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file this user may not read (one a container wrote as root into the folder) was an internal error; it is a
    config error naming the file and the way out. The refusal is a stand-in (the tests may run as root, whom
    permissions do not stop): reading any file raises PermissionError."""
    root = _folder(tmp_path)

    def refused(path: str) -> digests.FileFacts:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(digests, "_read_facts", refused)
    with pytest.raises(ConfigError) as caught:
        source_folder.scan(root, "image.source_dir", "code")
    assert caught.value.field == "image.source_dir" and "Permission denied" in caught.value.message
    assert str(root) in caught.value.message and ".dockerignore" in str(caught.value.hint)


def test_a_folder_that_cannot_be_listed_is_a_config_error_naming_it_refused_by_a_stand_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subfolder this user may not open was left out of the image without a word; it is a config error naming it.
    The refusal is a stand-in (root opens any folder): os.open refuses that one folder with EACCES."""
    root = _folder(tmp_path)
    real_open = os.open

    def refusing(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == os.fspath(root / "data"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)
    with pytest.raises(ConfigError) as caught:
        source_folder.scan(root, "image.source_dir", "code")
    assert caught.value.message.startswith(f"cannot read {root / 'data'}: Permission denied")
    monkeypatch.setattr(os, "open", real_open)
    assert "code/data/f0.bin" in {item.name for item in source_folder.scan(root, "image.source_dir", "code").files()}


@pytest.mark.parametrize("odd", [False, True], ids=["plain-folder", "folder-judged-one-by-one"])
def test_a_folder_whose_entries_cannot_be_looked_into_is_a_config_error_refused_by_a_stand_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: bool
) -> None:
    """A folder this user may list but not search (read permission without execute) gives its names but no stat of
    any: its files were left out of the image without a word; it is a config error naming the folder, whichever
    way the walk takes through it. The refusal is a stand-in (root searches any folder): os.lstat refuses the
    files of data/ with EACCES."""
    root = _folder(tmp_path)
    if odd:  # a compiled file sends the folder through _one_by_one
        (root / "data" / "x.pyc").write_bytes(b"\0")
    real_lstat = os.lstat

    def refusing(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if os.fspath(path).startswith("f") and kwargs.get("dir_fd") is not None:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", refusing)
    with pytest.raises(ConfigError) as caught:
        source_folder.scan(root, "image.source_dir", "code")
    assert caught.value.message.startswith(f"cannot read {root / 'data'}: Permission denied")
    assert caught.value.field == "image.source_dir" and ".dockerignore" in str(caught.value.hint)
