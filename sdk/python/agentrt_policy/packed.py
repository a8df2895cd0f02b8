"""The packed forms the host uses on its hot paths, decoded into the contract's types.

Layouts (wit/policy.wit, `observe-blocks` and `score-packed`; the Rust SDK's `packed` module is the
other implementation and the reference):

    block event, 3 words: [op | position << 8 | agent << 32, block hash, parent hash]
    score item,  5 words: [key, session, last-access, tokens | agent << 32, position | kind << 32]
"""

from typing import Iterator, List

from wit_world.imports.types import BlockEvent, BlockOp, Item, ItemKind

WORDS_PER_EVENT = 3
ITEM_WORDS = 5
MAX_POSITION = (1 << 24) - 1
_U32 = 0xFFFF_FFFF

_OPS = {op.value: op for op in BlockOp}
_KINDS = {kind.value: kind for kind in ItemKind}


def decode_blocks(words: List[int]) -> Iterator[BlockEvent]:
    """Block events from packed words. Ops this SDK does not know (a newer host) and trailing
    words that do not make a whole event are skipped, as in the Rust SDK."""
    for i in range(0, len(words) - WORDS_PER_EVENT + 1, WORDS_PER_EVENT):
        head = words[i]
        op = _OPS.get(head & 0xFF)
        if op is None:
            continue
        yield BlockEvent(
            op=op,
            agent=head >> 32,
            block_hash=words[i + 1],
            parent_hash=words[i + 2],
            position=(head >> 8) & MAX_POSITION,
        )


def decode_items(words: List[int]) -> List[Item]:
    """Score items from packed words. Unknown kinds (a newer host) decode as kv-block; trailing
    words that do not make a whole item are ignored (the host checks one score per item)."""
    items = []
    for i in range(0, len(words) - ITEM_WORDS + 1, ITEM_WORDS):
        tokens_agent = words[i + 3]
        position_kind = words[i + 4]
        items.append(
            Item(
                kind=_KINDS.get((position_kind >> 32) & 0xFF, ItemKind.KV_BLOCK),
                key=words[i],
                agent=tokens_agent >> 32,
                session=words[i + 1],
                last_access=words[i + 2],
                tokens=tokens_agent & _U32,
                position=position_kind & _U32,
            )
        )
    return items
