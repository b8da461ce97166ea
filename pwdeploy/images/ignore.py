"""``.dockerignore`` in a source folder, read as Docker reads it, and the files that look like credentials.

Docker's rules: one pattern a line, relative to the folder (a leading ``/`` changes nothing), ``#`` starts a
comment line, blank lines are skipped; ``*`` matches any run of characters but ``/``, ``?`` one such character,
``[...]`` a class, ``**`` any number of folders (none included), a backslash escapes; ``!`` before a pattern re-includes
what an earlier pattern left out; the last pattern that matches a path, or one of its parent folders, decides.
A small matcher, so no dependency: the libraries that exist follow gitignore, whose rules differ
(``*.pem`` there matches in every folder, in Docker only at the top).
"""

from __future__ import annotations

import fnmatch
import functools
import posixpath
import re
from pathlib import Path

IGNORE_FILE = ".dockerignore"
# Names that usually hold secrets; a pushed image is readable by everyone who can pull it.
CREDENTIAL_NAMES = (".env", "*.pem", "*key*.json", "credentials*.json", "id_rsa*", ".netrc", ".npmrc", ".pypirc")


class Rule:
    __slots__ = ("exception", "regex")  # a plain class: a NamedTuple class costs render 0.1-0.2 ms to make

    def __init__(self, regex: re.Pattern[str], exception: bool) -> None:
        self.regex = regex
        self.exception = exception  # a "!" line: matching paths are copied after all


class BadPattern(ValueError):
    """A line of a ``.dockerignore`` that is not a pattern (``[z-a]``): Docker refuses the file as well."""

    def __init__(self, line: int, pattern: str, problem: str) -> None:
        super().__init__(f"line {line}: {pattern!r} is not a valid pattern ({problem})")
        self.line, self.pattern, self.problem = line, pattern, problem


class IgnoreRules:
    """The rules of one ``.dockerignore`` (none when the file does not exist)."""

    def __init__(self, rules: tuple[Rule, ...] = ()) -> None:
        self.rules = rules
        self.has_exceptions = any(rule.exception for rule in rules)

    @classmethod
    def parse(cls, text: str) -> IgnoreRules:
        """The rules of ``text``; BadPattern for a line that is not a pattern."""
        rules = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            exception = line.startswith("!")
            pattern = posixpath.normpath(line[1:].strip() if exception else line).lstrip("/")
            if pattern in ("", "."):
                continue
            try:
                rules.append(Rule(re.compile(_regex(pattern)), exception))
            except re.error as exc:  # a class Go's regexp refuses as well: [z-a], [] ...
                raise BadPattern(number, line, exc.msg) from None
        return cls(tuple(rules))

    @classmethod
    def read(cls, folder: Path) -> IgnoreRules:
        path = folder / IGNORE_FILE
        return cls.parse(path.read_text(encoding="utf-8")) if path.is_file() else cls()

    def excluded(self, relative: str) -> bool:
        """Whether the path (relative, with ``/``) is left out of the build context."""
        if not self.rules:  # the usual case, once per file of the folder on every render that pins
            return False
        parents = relative.split("/")
        candidates = ["/".join(parents[: i + 1]) for i in range(len(parents))]
        excluded = False
        for rule in self.rules:
            if any(rule.regex.fullmatch(candidate) for candidate in candidates):
                excluded = not rule.exception
        return excluded

    def prunes(self, relative_dir: str) -> bool:
        """Whether a whole folder can be skipped unread: excluded, and no exception could bring a file back."""
        return not self.has_exceptions and self.excluded(relative_dir)


def looks_like_credentials(relative: str) -> bool:
    return _credentials().match(relative.rsplit("/", 1)[-1]) is not None


@functools.cache
def _credentials() -> re.Pattern[str]:
    """One match a name, made at the first look at a name (render of an unchanged folder never looks)."""
    return re.compile("|".join(fnmatch.translate(pattern) for pattern in CREDENTIAL_NAMES))


def _regex(pattern: str) -> str:
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):  # "**/": any folders, none included
                out.append("(?:.*/)?")
                i += 1
            else:
                out.append(".*")
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        elif char == "[":
            end = pattern.find("]", i + 2)
            if end == -1:
                out.append(re.escape(char))
            else:
                out.append(f"[{pattern[i + 1 : end]}]")  # as Go's filepath.Match: [^...] negates
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)
