r"""One rule for text that comes from outside (API answers, events, conditions, container logs quoted by
``status`` and ``diagnose``, registry answers, a stream's error text) before a terminal shows it.

- Control characters are made visible, as kubectl does since 1.26 (``EscapeTerminal`` in cli-runtime's
  printers/terminal.go turns ESC into ``^[`` and CR into ``\\r``): every C0 control but tab and newline in caret
  notation (``^[``, ``^@``, ``^G``), DEL as ``^?``, CR as ``\\r``. ESC is what starts every CSI/OSC/DCS
  sequence (``ESC[2J``, OSC 52 clipboard writes, OSC 8 links, title changes), so none of them can start.
- C1 controls (U+0080-U+009F: a terminal reads U+009B as CSI and U+009D as OSC), bidi and other invisible format
  characters (U+202E reverses what follows), line/paragraph separators and lone surrogates are escaped as
  ``\\x9b`` / ``\\u202e``.
- A cut never splits one of these escapes, so a shortened text never ends in half a sequence.
- ``masked`` replaces credential-looking values with ``***``: a ``NAME=value`` whose name says it holds a
  credential (the rule render uses to warn of literal credentials in ``main.env``), ``Authorization: Bearer ...``,
  URL userinfo and the shapes of well-known tokens (a bare JWT, a Google refresh token, long opaque keys too). It
  is the one masker: credential plugins' stderr (``kube.credential_plugin``) goes through it as well.

Import-light (``re`` only): every floor may use it."""

from __future__ import annotations

import functools
import re

ELLIPSIS = "..."

# Characters shown otherwise: C0 but tab and newline, DEL, C1, ALM, zero-width and bidi marks, LS/PS, the bidi
# embeddings/overrides/isolates, word joiner and invisible operators, BOM, interlinear annotations, surrogates.
_UNSAFE_CHARS = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb\ud800-\udfff"
)


@functools.cache
def unsafe() -> re.Pattern[str]:
    """One character shown otherwise (compiled on first use: `pwdeploy --help` prints nothing from outside)."""
    return re.compile(f"[{_UNSAFE_CHARS}]")


def _visible(char: str) -> str:
    code = ord(char)
    if char == "\r":
        return "\\r"
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def printable(text: str, limit: int | None = None, *, one_line: bool = False) -> str:
    """``text`` as a terminal may show it (see the module's rule); with ``limit``, at most that many characters,
    ending in ``...`` when cut (never inside an escape). ``one_line``: tabs and newlines become spaces too."""
    if limit is not None:
        text = text[: limit + 1]  # every character shows as one or more: nothing beyond can fit
    if one_line:
        text = text.replace("\n", " ").replace("\t", " ")
    pieces: list[tuple[str, bool]] = []  # (text, whether it is one escape)
    at = 0
    for match in unsafe().finditer(text):
        pieces += [(text[at : match.start()], False), (_visible(match.group()), True)]
        at = match.end()
    pieces.append((text[at:], False))
    shown = "".join(piece for piece, _ in pieces)
    if limit is None or len(shown) <= limit:
        return shown
    return _take(pieces, max(limit - len(ELLIPSIS), 0)) + ELLIPSIS


def _take(pieces: list[tuple[str, bool]], room: int) -> str:
    """The first ``room`` characters of the pieces, an escape kept whole or left out."""
    kept: list[str] = []
    for piece, escape in pieces:
        if len(piece) > room:
            kept.append("" if escape else piece[:room])
            break
        kept.append(piece)
        room -= len(piece)
    return "".join(kept)


def one_line(text: str, limit: int | None = None) -> str:
    """A value for one cell or one line: printable, runs of whitespace as one space."""
    return printable(" ".join(text.split()), limit, one_line=True)


# ---------------------------------------------------------------------------------------------- credentials

# An env NAME whose last part says it holds a credential (WANDB_API_KEY, HF_TOKEN, DB_PASSWORD, GITHUB_PAT,
# GCP_CREDENTIALS), or that names an API key anywhere (OPENAI_APIKEY, APIKEY_PROD).
_CREDENTIAL_NAME = (
    r"(?:^|_)(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|PRIVATE_KEY|ACCESS_KEY|AUTH|PAT)$|APIKEY"
)
MASK = "***"


@functools.cache
def _masks() -> tuple[re.Pattern[str], ...]:
    """The patterns of ``masked``, compiled on first use: `pwdeploy --help` and render never mask."""
    return (
        # Authorization: Bearer TOKEN (and Proxy-Authorization, Basic, a bare value)
        re.compile(
            r"(?i)(?P<head>\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|negotiate)\s+)?)"
            r"(?P<value>[^\s\"',;]+)"
        ),
        # a scheme's token: any Bearer value (RFC 6750 b64token), a Basic one of 8 characters or more (shorter is
        # prose: "basic auth")
        re.compile(
            r"(?i)(?P<head>\b(?:bearer\s+(?=[A-Za-z0-9._~+/=-])|basic\s+(?=[A-Za-z0-9._~+/=-]{8,})))"
            r"(?P<value>[A-Za-z0-9._~+/=-]+)"
        ),
        re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://)(?P<value>[^/\s@]+)@"),  # URL userinfo
    )


@functools.cache
def _assignment() -> re.Pattern[str]:
    """``NAME=value``, ``NAME: value``, ``"NAME": "value"``."""
    return re.compile(r"(?P<name>[A-Za-z][\w.-]*)(?P<sep>[\"']?\s*(?:=|:)\s*[\"']?)(?P<value>[^\s\"',;&]+)")


@functools.cache
def _token_shapes() -> re.Pattern[str]:
    """Well-known token shapes: Hugging Face, GitHub, GitLab, Slack, AWS access key ids, Google OAuth access
    tokens and refresh tokens (``1//0...``), OpenAI-style secret keys, Google API keys, a JWT (three base64url
    parts, the first a JSON object: ``eyJ``), and any run of 32 or more key characters that mixes digits,
    upper and lower case (an opaque key no shape names)."""
    return re.compile(
        r"\b(?:hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|glpat-[\w-]{20,}|xox[abprs]-[\w-]{10,}|AKIA[0-9A-Z]{16}"
        r"|ya29\.[\w.-]{8,}|sk-[\w-]{20,}|AIza[\w-]{35}|eyJ[\w-]+\.[\w-]+\.[\w-]*)"
        r"|(?<![\w/])1//[\w-]{8,}"
        r"|(?=[\w+/=.-]*\d)(?=[\w+/=.-]*[A-Z])(?=[\w+/=.-]*[a-z])[\w+/=.-]{32,}"
    )


def looks_like_credential(name: str) -> bool:
    """Whether a variable's (or a key's) name says it holds a credential: ``HF_TOKEN``, ``db-password``."""
    return re.search(_CREDENTIAL_NAME, name.upper().replace(".", "_").replace("-", "_")) is not None


def masked(text: str) -> str:
    """``text`` with every credential-looking value replaced by ``***`` (names and separators kept, so the
    evidence still says which variable or header it was)."""
    authorization, scheme_token, userinfo = _masks()
    text = authorization.sub(lambda m: m["head"] + MASK, text)
    text = scheme_token.sub(lambda m: m["head"] + MASK, text)
    text = userinfo.sub(lambda m: m["head"] + MASK + "@", text)
    text = _assignment().sub(
        lambda m: m["name"] + m["sep"] + MASK if looks_like_credential(m["name"]) else m.group(), text
    )
    return _token_shapes().sub(MASK, text)


def evidence(text: str, limit: int | None = None) -> str:
    """Text quoted from outside as evidence: credentials masked, on one line, printable, at most ``limit``."""
    return one_line(masked(text), limit)
