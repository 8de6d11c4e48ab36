"""Token chunks to text deltas, for streaming: incremental detokenisation with stop strings.

Decoding each chunk on its own breaks BPE merges and multi-byte characters, so the assembler
decodes the generated sequence and emits what is new.  It holds back an unfinished UTF-8
character (decoded as U+FFFD) and any tail that could be the beginning of a stop string;
once a stop string appears, the text ends right before it (OpenAI's semantics: the stop
string itself is not returned).
"""

from __future__ import annotations

from collections.abc import Sequence

_REPLACEMENT = "\ufffd"


class TextAssembler:
    def __init__(self, tokenizer, stop: Sequence[str] = ()):
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.tokens: list[int] = []
        self.sent = 0  # characters already returned
        self.stopped = False
        self._text = ""

    def push(self, tokens: Sequence[int]) -> str:
        """Add generated tokens; return the text that is now safe to show."""
        if self.stopped:
            return ""
        self.tokens += list(tokens)
        self._text = self.tokenizer.decode(self.tokens, skip_special_tokens=True)
        cut = min((i for i in (self._text.find(s) for s in self.stop) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._text = self._text[:cut]
            return self._release(len(self._text))
        return self._release(len(self._text) - self._held_back())

    def finish(self) -> str:
        """The rest of the text once generation is over (nothing held back any more)."""
        if self._text.endswith(_REPLACEMENT) and not self.stopped:
            self._text = self._text.rstrip(_REPLACEMENT)
        return self._release(len(self._text))

    @property
    def text(self) -> str:
        return self._text

    def _held_back(self) -> int:
        text = self._text
        hold = len(text) - len(text.rstrip(_REPLACEMENT))
        for stop in self.stop:
            for n in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:n]):
                    hold = max(hold, n)
                    break
        return hold

    def _release(self, upto: int) -> str:
        upto = max(upto, self.sent)
        delta = self._text[self.sent : upto]
        self.sent = upto
        return delta
