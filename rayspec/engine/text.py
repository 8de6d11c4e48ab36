"""Token chunks to text deltas, for streaming: incremental detokenisation with stop strings.

Decoding each chunk on its own breaks BPE merges and multi-byte characters, so the assembler
decodes the generated sequence and emits what is new.  It holds back an unfinished UTF-8
character (decoded as U+FFFD) and any tail that could be the beginning of a stop string;
once a stop string appears, the text ends right before it (OpenAI's semantics: the stop
string itself is not returned).

A completion is decoded after the last few prompt tokens (`ContinuationDecoder`), as vLLM's
incremental detokeniser does: SentencePiece-style tokenizers (Llama 2, Mistral, Gemma) drop
the leading space of a sequence's first word, so a completion decoded on its own would lose
the space between the prompt and its first word.
"""

from __future__ import annotations

from collections.abc import Sequence

REPLACEMENT = "\ufffd"
CONTEXT_TOKENS = 4  # prompt tokens decoded before a completion; any word boundary shows in fewer


class ContinuationDecoder:
    """The text of generated tokens as it reads after the prompt (special tokens skipped)."""

    def __init__(self, tokenizer, prompt_ids: Sequence[int] = ()):
        self.tokenizer = tokenizer
        self.context = [int(t) for t in prompt_ids][-CONTEXT_TOKENS:]
        self.head = self._decode(self.context) if self.context else ""
        # A prompt ending in half a character would decode differently once the completion
        # finishes it: then the completion is decoded on its own.
        if self.head.endswith(REPLACEMENT):
            self.context, self.head = [], ""

    def decode(self, ids: Sequence[int]) -> str:
        if self.context:
            whole = self._decode([*self.context, *ids])
            if whole.startswith(self.head):
                return whole[len(self.head):]
        return self._decode(ids)

    def _decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


class TextAssembler:
    def __init__(self, tokenizer, stop: Sequence[str] = (), prompt_ids: Sequence[int] = ()):
        self.decoder = ContinuationDecoder(tokenizer, prompt_ids)
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
        self._text = self.decoder.decode(self.tokens)
        cut = min((i for i in (self._text.find(s) for s in self.stop) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._text = self._text[:cut]
            return self._release(len(self._text))
        return self._release(len(self._text) - self._held_back())

    def finish(self) -> str:
        """The rest of the text once generation is over (nothing held back any more)."""
        if self._text.endswith(REPLACEMENT) and not self.stopped:
            self._text = self._text.rstrip(REPLACEMENT)
        return self._release(len(self._text))

    @property
    def text(self) -> str:
        return self._text

    def _held_back(self) -> int:
        """Characters at the end that may still change: an unfinished character, and before it
        the longest tail that begins a stop string (which that character may continue)."""
        text = self._text.rstrip(REPLACEMENT)
        unfinished = len(self._text) - len(text)
        prefix = 0
        for stop in self.stop:
            for n in range(min(len(stop) - 1, len(text)), prefix, -1):
                if text.endswith(stop[:n]):
                    prefix = n
                    break
        return unfinished + prefix

    def _release(self, upto: int) -> str:
        upto = max(upto, self.sent)
        delta = self._text[self.sent : upto]
        self.sent = upto
        return delta
