"""Token chunks to text deltas, for streaming: incremental detokenisation with stop strings.

Decoding each chunk on its own breaks BPE merges and multi-byte characters, and decoding the
whole completion at every step costs O(length) per step (O(length²) per request).  So
`IncrementalDecoder` decodes a short window, as vLLM's incremental detokeniser does: the
tokens of the last settled chunk (as context) and those after them; text becomes settled once
it no longer ends in an unfinished UTF-8 character (decoded as U+FFFD).

A completion is read after the last few prompt tokens: SentencePiece-style tokenizers
(Llama 2, Mistral, Gemma) drop the leading space of a sequence's first word, so a completion
decoded on its own would lose the space between the prompt and its first word.

`TextAssembler` holds back an unfinished character and any tail that could be the beginning
of a stop string; once a stop string appears, the text ends right before it (OpenAI's
semantics: the stop string itself is not returned), or right after it with vLLM's
`include_stop_str_in_output`.  `StopFinder` finds the token that completes a stop string, for
the engine, which must end the completion there; both decode as the other does.
"""

from __future__ import annotations

import codecs
import threading
from collections.abc import Sequence
from typing import NamedTuple

REPLACEMENT = "\ufffd"
CONTEXT_TOKENS = 4  # prompt tokens decoded before a completion; any word boundary shows in fewer


def listed(value) -> list:
    """A field that takes one string or a list (None: none), as a list: a bare string is one
    entry, as OpenAI and vLLM read `stop`, not a list of its characters."""
    return [value] if isinstance(value, str) else list(value or ())


# A character is at most 4 UTF-8 bytes, so at most 3 of them wait for the rest; decoders show
# those as one U+FFFD (byte-level BPE) or one per byte (SentencePiece's byte fallback).  A
# longer run of U+FFFD ends in those, and the rest are the text's — but where byte fallback's
# decoder shows a whole run of byte tokens so, while one character of it is unfinished
# (`IncrementalDecoder.finished`).
MAX_PENDING_BYTES = 3


def finished_length(text: str) -> int:
    """The length of `text` without the character it may end in unfinished: up to
    MAX_PENDING_BYTES trailing U+FFFD (no copy made)."""
    end = len(text)
    while end > len(text) - MAX_PENDING_BYTES and end and text[end - 1] == REPLACEMENT:
        end -= 1
    return end


def built_once(tokenizer, built: dict, lock: threading.Lock, build):
    """`build(tokenizer)`, kept in `built` per tokenizer object — held with it, so that its id is
    not reused by another's."""
    with lock:
        held = built.get(id(tokenizer))
        if held is None or held[0] is not tokenizer:
            held = built[id(tokenizer)] = (tokenizer, build(tokenizer))
    return held[1]


_FALLBACK_BYTES: dict[int, tuple[object, dict[int, int]]] = {}
_FALLBACK_BYTES_LOCK = threading.Lock()


def _fallback_bytes(tokenizer) -> dict[int, int]:
    """SentencePiece byte fallback's tokens ("<0xNN>", Llama 2's, Mistral's) and their bytes;
    none for other tokenizers (or one that only decodes)."""
    convert = getattr(tokenizer, "convert_tokens_to_ids", None)
    ids = convert([f"<0x{b:02X}>" for b in range(256)]) if convert is not None else [None]
    if any(i is None for i in ids) or len(set(ids)) < len(ids):  # unknown pieces: all the unknown token's id
        return {}
    return {int(i): b for b, i in enumerate(ids)}


class _Run(NamedTuple):
    """The run of byte fallback tokens the tokens end in, as ByteFallback decodes it: the run's
    UTF-8 if it is whole, else one U+FFFD per byte token, its whole characters included; tokens
    that decode to nothing (skipped special tokens, ids out of the vocabulary) do not end it."""
    last: int  # its last byte token
    count: int  # its byte tokens
    partial: bytes  # the bytes of an unfinished character at its end
    cut: int  # the first byte token of that character
    bad: bool  # not UTF-8, whatever bytes follow
    base: str | None  # the completion's text before it (None: the run began in the prompt)

    def fed(self, index: int, byte: int) -> _Run:
        partial, bad, cut = self.partial, self.bad, self.cut
        if not bad:
            decoder = codecs.getincrementaldecoder("utf-8")()
            try:  # the bytes before `partial` are whole characters: UTF-8 resynchronises after them
                decoder.decode(partial + bytes((byte,)))
                cut = index if not partial else cut
                partial = decoder.getstate()[0]
            except UnicodeDecodeError:
                partial, bad = b"", True
        return self._replace(last=index, count=self.count + 1, partial=partial, bad=bad, cut=cut)

    @property
    def shown_as_replacements(self) -> bool:
        """Whether decoding shows it as one U+FFFD per byte token (not whole UTF-8)."""
        return self.bad or bool(self.partial)


class _State(NamedTuple):
    window: int  # first token of the decoded window
    read: int  # tokens before this are settled
    head: str  # the text of the window's settled tokens, ids[window:read]
    settled: str  # text of ids[context:read]
    text: str  # text of all the tokens
    run: _Run | None  # the byte fallback run the tokens end in


class IncrementalDecoder:
    """The text of generated tokens as it reads after the prompt (special tokens skipped unless
    `skip_special_tokens` is False), equal to decoding the prompt's last tokens and the
    completion at once and dropping the prompt's text, at the cost of a few tokens' decoding
    per push.

    SentencePiece's byte fallback decodes a run of byte tokens as a whole: as UTF-8, or as one
    U+FFFD per token while it is not whole UTF-8, so that a character left unfinished, or a
    byte no character takes, turns the run's earlier characters into U+FFFD.  While a run shows
    so, its text is written here from its count of bytes, undecoded, and once a token ends it
    the window starts again at its last byte; its whole characters are decoded in windows like
    any text.

    Where a window's text is not an extension of its context's (a tokenizer whose decoding
    rewrites across tokens, e.g. clean-up of spaces before punctuation), the decoder falls back
    to decoding the whole completion at every push, which is exact."""

    def __init__(self, tokenizer, prompt_ids: Sequence[int] = (), skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self._ids = [int(t) for t in prompt_ids][-CONTEXT_TOKENS:]
        self._context = len(self._ids)
        head = self._decode(self._ids) if self._ids else ""
        # A prompt ending in half a character would decode differently once the completion
        # finishes it: then the completion is decoded on its own.
        if head.endswith(REPLACEMENT):
            self._ids, self._context, head = [], 0, ""
        self._whole = False  # fallen back to decoding the whole completion
        # byte fallback's tokens, looked up (256 of them) once per tokenizer, not per request
        self._bytes = built_once(tokenizer, _FALLBACK_BYTES, _FALLBACK_BYTES_LOCK, _fallback_bytes)
        self._silent: dict[int, bool] = {}  # tokens that decode to nothing, within a run of byte tokens
        run = None  # a run the prompt ends in, which the completion's bytes would go on
        for index, token in enumerate(self._ids if self._bytes else ()):
            if token in self._bytes:
                run = (run or _Run(index, 0, b"", index, False, None)).fed(index, self._bytes[token])
            elif run is not None and not self._is_silent(token):
                run = None
        self._state = _State(0, self._context, head, "", "", run)
        self._prompt_head = head
        self._peeked: tuple[list[int], _State] | None = None  # the last peek's ids and state, for a push of them
        self.finished = 0  # the length of the last push's or peek's text without what may still change

    @property
    def text(self) -> str:
        return self._state.text

    @property
    def windowed(self) -> bool:
        """Whether pushes still decode windows (not fallen back to the whole completion)."""
        return not self._whole

    def push(self, ids: Sequence[int]) -> str:
        """Add tokens; return the whole text."""
        ids = [int(t) for t in ids]
        peeked, self._peeked = self._peeked, None
        start = len(self._ids)
        self._ids += ids
        self._state = peeked[1] if peeked is not None and peeked[0] == ids else self._advanced(self._state, start)
        self.finished = self._finished(self._state)
        return self.text

    def peek(self, ids: Sequence[int]) -> str:
        """The text `push(ids)` would give, leaving the decoder as it is."""
        extra = [int(t) for t in ids]
        start = len(self._ids)
        self._ids += extra
        try:
            state = self._advanced(self._state, start)
        finally:
            del self._ids[start:]
        self._peeked = (extra, state)  # a push of the same tokens next reuses the decoding
        self.finished = self._finished(state)
        return state.text

    def _finished(self, state: _State) -> int:
        """`finished_length(text)`, less a run of byte fallback tokens at the end that an
        unfinished character ends: the decoder shows such a run as one U+FFFD per token, all of
        which the character's last byte turns into the run's characters ("🙂" and two bytes of
        the next emoji are six U+FFFD)."""
        text, run = state.text, state.run
        pending = run.count if run is not None and run.partial and not run.bad else 0
        return max(min(finished_length(text), len(text) - pending), 0)

    def _advanced(self, state: _State, start: int) -> _State:
        """The state once `self._ids[start:]` are taken in."""
        ids = self._ids
        window, read, head, settled, text, run = state
        for index in range(start, len(ids)):
            token = ids[index]
            byte = self._bytes.get(token)
            if byte is not None:
                if run is None:
                    # The text before a run is final: a run's text is its bytes' alone.
                    tail = "" if index == start or self._whole else self._tail(ids[window:index], head)
                    base = text if index == start else settled + (tail or "")
                    run = _Run(index, 0, b"", index, False, base)
                elif run.base is None:
                    run = run._replace(count=0, base=self._inherited_base())
                run = run.fed(index, byte)
            elif run is not None and not self._is_silent(token):
                if run.shown_as_replacements and run.base is not None and not self._whole:
                    # A run is final once a token ends it: the window starts again at its last
                    # byte, which reads the next token as within a text (no space dropped).
                    settled = run.base + REPLACEMENT * run.count
                    window, read = run.last, index
                    head = self._decode(ids[window:read])
                run = None
        if self._whole:
            text = self._whole_text(ids)
        elif run is not None and run.shown_as_replacements and run.base is not None:
            text = run.base + REPLACEMENT * run.count
            if not run.bad and run.cut > read:
                # The run's whole characters are settled as any text, so that the window does
                # not grow along a run whose chunks end within characters.
                tail = self._tail(ids[window:run.cut], head)
                if tail is None:
                    text = self._whole_text(ids)
                elif tail and not tail.endswith(REPLACEMENT):
                    settled += tail
                    window, read = read, run.cut
                    head = self._decode(ids[window:read])
        else:
            tail = self._tail(ids[window:], head)
            if tail is None:
                text = self._whole_text(ids)
            elif tail and not tail.endswith(REPLACEMENT):
                # The next window begins at these tokens: some of them have text, so that the
                # window's first word is not read as a sequence's first (SentencePiece drops its space).
                settled = text = settled + tail
                window, read = read, len(ids)
                head = self._decode(ids[window:read])
            else:
                text = settled + tail
        return _State(window, read, head, settled, text, run)

    def _inherited_base(self) -> str:
        """The completion's text before its bytes where it goes on with a run the prompt ends in
        (whole characters), while that run shows as U+FFFD: what of the prompt's U+FFFD for the
        run is past the prompt's text, as `_whole_text` reads it (none where the prompt's text
        is not a prefix any more: the completion is then read on its own, its bytes' U+FFFD
        alone).  A lead byte after the prompt shows the run so; the prompt is a few tokens."""
        lead = next(t for t, b in self._bytes.items() if b == 0xF0)
        prompt = self._decode(self._ids[:self._context] + [lead])[:-1]
        return prompt[len(self._prompt_head):] if prompt.startswith(self._prompt_head) else ""

    def _is_silent(self, token: int) -> bool:
        """Whether the token decodes to nothing (a skipped special token, an unknown id), so that
        a run of byte tokens goes on across it: asked of the tokenizer once per token."""
        silent = self._silent.get(token)
        if silent is None:
            c3, a9 = (next(t for t, b in self._bytes.items() if b == byte) for byte in (0xC3, 0xA9))
            silent = self._silent[token] = self._decode([c3, token, a9]) == "é"
        return silent

    def _tail(self, window_ids: list[int], head: str) -> str | None:
        """The text of the window's tokens after the settled ones, or None once only a whole
        decode is exact."""
        if not self._whole:
            window = self._decode(window_ids)
            if window.startswith(head):
                return window[len(head):]
            self._whole = True
        return None

    def _whole_text(self, ids: list[int]) -> str:
        if self._context:
            head = self._decode(ids[:self._context])
            whole = self._decode(ids)
            if whole.startswith(head):
                return whole[len(head):]
        return self._decode(ids[self._context:])

    def _decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=self.skip_special_tokens)


class StopMatch(NamedTuple):
    start: int  # where the stop string begins in the text
    stop: str

    @property
    def end(self) -> int:
        return self.start + len(self.stop)


class StopStrings:
    """Finds the first stop string in a text that grows, searching only what is new (and the
    few characters before it a stop string could begin in)."""

    def __init__(self, stop: Sequence[str]):
        self.stop = [s for s in stop if s]
        self._clear = 0  # text[:clear] is searched (and will not change, unless the decoding rewrites it)
        self._searched = ""  # the text last searched

    def find(self, text: str, finished: int | None = None) -> StopMatch | None:
        """The stop string that ends past the searched text and begins first in `text` (of
        two beginning there, the first listed), or None.  Where `text` no longer begins with
        the searched text (a decoding that rewrites across tokens, e.g. clean-up of spaces
        before punctuation, turned "world " into "world."), the search begins where they differ.

        An unfinished character at the end is no text yet: a stop string is not matched
        against the U+FFFD standing in for it, which the next token may turn into "¡" — else
        a completion would stop there when its steps end between the character's tokens and
        not when one step holds both, and a seed's tokens would depend on the tree (`finished`:
        the length of `text` without it, as its decoder tells it; else `finished_length`)."""
        clear, end = self._clear, finished_length(text) if finished is None else finished
        if not text.startswith(self._searched[:clear]):
            clear = next((i for i, (a, b) in enumerate(zip(text, self._searched)) if a != b), min(clear, len(text)))
        starts = ((text.find(s, max(clear - len(s) + 1, 0), end), s) for s in self.stop)
        return min((StopMatch(i, s) for i, s in starts if i >= 0), key=lambda match: match.start, default=None)

    def searched(self, text: str, finished: int | None = None) -> None:
        """`text` is searched: no stop string ending in what of it is settled will be found
        (it held none, or those it held came before min_tokens and do not count)."""
        self._clear, self._searched = finished_length(text) if finished is None else finished, text


class _StopScan:
    """Generated tokens decoded and searched for stop strings, but for the first `min_tokens`
    (vLLM's min_tokens: a stop string they complete does not stop the completion)."""

    def __init__(self, tokenizer, stop: Sequence[str] = (), prompt_ids: Sequence[int] = (), min_tokens: int = 0,
                 skip_special_tokens: bool = True):
        self.decoder = IncrementalDecoder(tokenizer, prompt_ids, skip_special_tokens)
        self.stops = StopStrings(stop)
        self._exempt = min_tokens  # tokens still to come that complete no stop string

    def _searchable(self, tokens: Sequence[int]) -> Sequence[int]:
        """Take in the tokens still exempt, unsearched; return the rest."""
        exempt, self._exempt = tokens[: self._exempt], max(self._exempt - len(tokens), 0)
        if exempt:
            self.stops.searched(self.decoder.push(exempt), self.decoder.finished)
        return tokens[len(exempt):]


class StopFinder(_StopScan):
    """Finds where generated tokens complete a stop string, decoded as `TextAssembler` decodes
    them, reading only the new tokens' text (see `IncrementalDecoder`)."""

    def cut(self, tokens: list[int]) -> tuple[int, str] | None:
        """The number of tokens up to and including the one that completes a stop string (none
        had before them), and that stop string; None, and the tokens taken in, if none does."""
        rest = self._searchable(tokens)
        if not rest or self.stops.find(self.decoder.peek(rest), self.decoder.finished) is None:
            self.stops.searched(self.decoder.push(rest), self.decoder.finished)
            return None
        # The first token that completes one: the stop string then is the one the text shows
        # (a longer one begun earlier in the tokens may be completed later among them).
        for n in range(1, len(rest) + 1):
            match = self.stops.find(self.decoder.peek(rest[:n]), self.decoder.finished)
            if match is not None:
                return len(tokens) - len(rest) + n, match.stop


class TextAssembler(_StopScan):
    """The text of a completion as it grows, stop strings applied.  min_tokens: a stop string
    completed by one of the completion's first min_tokens tokens does not stop it (vLLM's).
    include_stop: the text ends after the stop string rather than before it (vLLM's
    include_stop_str_in_output).  skip_special_tokens: as the tokenizer's `decode` takes it."""

    def __init__(self, tokenizer, stop: Sequence[str] = (), prompt_ids: Sequence[int] = (), min_tokens: int = 0,
                 include_stop: bool = False, skip_special_tokens: bool = True):
        super().__init__(tokenizer, stop, prompt_ids, min_tokens, skip_special_tokens)
        self.include_stop = include_stop
        self.sent = 0  # characters already returned
        self.stopped = False
        self._text = ""

    def push(self, tokens: Sequence[int]) -> str:
        """Add generated tokens; return the text that is now safe to show."""
        if self.stopped:
            return ""
        self._text = self.decoder.push(self._searchable(tokens))
        match = self.stops.find(self._text, self.decoder.finished)
        if match is not None:
            self.stopped = True
            self._text = self._text[: match.end if self.include_stop else match.start]
            return self._release(len(self._text))
        self.stops.searched(self._text, self.decoder.finished)
        return self._release(len(self._text) - self._held_back())

    def push_chunk(self, tokens: Sequence[int], finish_reason: str | None, stop_reason) -> str:
        """`push` a step's tokens; of a step a stop token id ended (`stop_reason`), with
        include_stop, that token's text too (vLLM's; the token is not the completion's)."""
        text = self.push(tokens)
        if self.include_stop and finish_reason == "stop" and isinstance(stop_reason, int):
            text += self.push([stop_reason])
        return text

    def finish(self) -> str:
        """The rest of the text once generation is over (nothing held back any more)."""
        if not self.stopped:  # an unfinished character's U+FFFD go; those of the text stay, streamed or not
            self._text = self._text[:self.decoder.finished]
        return self._release(len(self._text))

    @property
    def text(self) -> str:
        return self._text

    def _held_back(self) -> int:
        """Characters at the end that may still change: an unfinished character, and before it
        the longest tail that begins a stop string (which that character may continue)."""
        finished = self.decoder.finished
        prefix = 0
        for stop in self.stops.stop:
            # Only tails that begin with the stop string's first character and end with the
            # character its prefix of their length ends in are compared, longest first: trying
            # every length cost O(length²) a step (5 ms for one stop string of 20k characters).
            start = finished - min(len(stop) - 1, finished)
            while (start := self._text.find(stop[0], start, finished - prefix)) >= 0:
                if stop[finished - start - 1] == self._text[finished - 1] and stop.startswith(
                        self._text[start:finished]):
                    prefix = finished - start
                    break
                start += 1
        return len(self._text) - finished + prefix

    def _release(self, upto: int) -> str:
        upto = max(upto, self.sent)
        delta = self._text[self.sent : upto]
        self.sent = upto
        return delta


def bad_words_token_ids(tokenizer, words: Sequence[str]) -> list[tuple[int, ...]]:
    """vLLM's bad_words as token sequences: each word (leading spaces stripped) as the
    tokenizer encodes it at the start of a text, and as it encodes it after a space where that
    gives a different first token for as many tokens (a word-initial token, as in " word"),
    so that the word is banned both at the start of the completion and within it.  As in
    vLLM, a spaced form of another length is not banned (" gives" is one token of a
    byte-level BPE whose "gives" is two), nor any other tokenization of the word's text."""
    sequences = []
    for word in words:
        bare = word.lstrip()
        if not bare:
            raise ValueError("bad_words: a word must have a character other than spaces")
        alone = tuple(tokenizer.encode(bare, add_special_tokens=False))
        spaced = tuple(tokenizer.encode(" " + bare, add_special_tokens=False))
        sequences.append(alone)
        if spaced[:1] != alone[:1] and len(spaced) == len(alone):
            sequences.append(spaced)
    return sequences
