"""A check of text every front end makes, in a module of its own that imports nothing: the
engine's package imports torch, and the gRPC SDK (`rayspec.client`) must not."""

from __future__ import annotations


def check_text(text: str, name: str) -> str:
    """`text`, or ValueError naming `name` when it is not Unicode text that UTF-8 can encode:
    JSON's escapes can spell a lone surrogate ("\\ud800"), which tokenizers cannot take, and
    protobuf's own refusal of one names no field."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{name} is not valid Unicode text: it holds a lone surrogate "
                         f"(U+{ord(text[error.start]):04X}) at character {error.start}") from None
    return text
