"""The prefix key of a gateway request (issue 32): chained block hashes (:mod:`semsched.core.prefix`) for the
``prefix-affinity`` router, so requests that repeat a prompt's beginning (a conversation's next turn, a shared
system prompt) go to the backend whose prefix cache holds it.

A completion whose prompt is token ids is hashed in :data:`TOKEN_BLOCK_SIZE`-token blocks (vLLM's default KV
block); any other prompt (text, chat messages joined as the classifier reads them) in
:data:`~semsched.core.prefix.PROMPT_CHUNK_CHARS`-character chunks. The hashes are the same in every process, so
gateway replicas key prefixes alike.
"""

from __future__ import annotations

from semsched.core.prefix import PROMPT_CHUNK_CHARS, text_block_hashes, token_block_hashes
from semsched.gateway.api import ChatBody, CompletionBody

#: tokens per hashed block of a token-id prompt
TOKEN_BLOCK_SIZE = 16


def request_prefix_hashes(body: CompletionBody | ChatBody, text: str) -> tuple[int, ...] | None:
    """The request's prefix hashes: of its token ids when its prompt is one list of them, else of ``text`` (the
    prompt as the classifier reads it); None when there is nothing to hash."""
    prompt = getattr(body, "prompt", None)
    if isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
        return token_block_hashes(prompt, TOKEN_BLOCK_SIZE) or None
    return (text_block_hashes(text, PROMPT_CHUNK_CHARS) or None) if text else None
