"""Prompt block hashes: what vLLM's automatic prefix caching and a prefix-aware router key blocks by.

A request's token sequence is cut into full blocks of ``block_size`` tokens; block ``i``'s hash covers its own
tokens and the hash of block ``i - 1`` (a chained hash, as vLLM's block hashes), so two sequences share the hash
of block ``i`` exactly when they share their first ``(i + 1) * block_size`` tokens. A partial last block has no
hash (vLLM caches full blocks only).

The hashes are 63-bit integers from BLAKE2b, the same in every process and on every machine (Python's ``hash`` of
a string is salted per process), so gateway replicas can share them. Three sources:

* :func:`token_block_hashes`: token ids (a tokenized prompt, or a prompt plus a replayed answer);
* :func:`text_block_hashes`: prompt text in fixed-size character chunks, for a gateway without token ids;
* :func:`regroup_block_hashes`: a Mooncake trace's ``hash_ids`` (ids of 512-token blocks, equal ids for equal
  prefixes) cut into the engine's smaller blocks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from semsched.core.request import InvalidRequestError

#: the block the Mooncake traces' ``hash_ids`` stand for (tokens)
MOONCAKE_BLOCK_TOKENS = 512
#: the gateway's prefix chunks: characters of prompt text per hash (about 16 tokens of English, a KV block)
PROMPT_CHUNK_CHARS = 64
_MASK = (1 << 63) - 1
_SEED = b"semsched-prefix"


def chain_hashes(blocks: Iterable[bytes]) -> tuple[int, ...]:
    """One hash per block, each over the block's bytes and the hash before it."""
    hashes: list[int] = []
    previous = _SEED
    for block in blocks:
        digest = hashlib.blake2b(previous + block, digest_size=8).digest()
        hashes.append(int.from_bytes(digest, "little") & _MASK)
        previous = digest
    return tuple(hashes)


def _check_block_size(block_size: int) -> None:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise InvalidRequestError(f"block_size: must be an integer >= 1 (got {block_size!r})")


def token_block_hashes(token_ids: Sequence[int], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the full ``block_size``-token blocks of ``token_ids``."""
    _check_block_size(block_size)
    full = len(token_ids) // block_size
    return chain_hashes(
        b"".join(int(t).to_bytes(8, "little", signed=True) for t in token_ids[i * block_size:(i + 1) * block_size])
        for i in range(full)
    )


def text_block_hashes(text: str, chunk_chars: int) -> tuple[int, ...]:
    """Chained hashes of the full ``chunk_chars``-character chunks of ``text`` (a prefix key without a
    tokenizer: equal text prefixes give equal leading hashes, whatever the tokenizer)."""
    _check_block_size(chunk_chars)
    full = len(text) // chunk_chars
    return chain_hashes(text[i * chunk_chars:(i + 1) * chunk_chars].encode("utf-8") for i in range(full))


def regroup_block_hashes(
    hash_ids: Sequence[int], num_tokens: int, block_size: int, source_block_tokens: int = MOONCAKE_BLOCK_TOKENS
) -> tuple[int, ...]:
    """Engine-block hashes of a ``num_tokens``-token prompt described by ``hash_ids``, one id per
    ``source_block_tokens``-token block (a Mooncake trace): engine block ``j`` lies in source block
    ``j * block_size // source_block_tokens`` (and the next, when it straddles two) and is keyed by their ids and
    its position. Only the
    full engine blocks of the prompt are hashed, and only as far as ``hash_ids`` reach."""
    _check_block_size(block_size)
    _check_block_size(source_block_tokens)
    covered = min(num_tokens, len(hash_ids) * source_block_tokens)
    full = covered // block_size

    def key(j: int) -> bytes:  # the ids of every source block the engine block overlaps, and its offset
        start, last = j * block_size, (j + 1) * block_size - 1
        sources = range(start // source_block_tokens, last // source_block_tokens + 1)
        offset = start % source_block_tokens
        return b"".join(int(hash_ids[s]).to_bytes(8, "little", signed=True) for s in sources) + offset.to_bytes(
            8, "little")

    return chain_hashes(key(j) for j in range(full))
