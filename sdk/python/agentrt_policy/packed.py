"""The packed forms the host uses on its hot paths, decoded into the contract's types — and encoded,
as the host does, for native tests.

This module and `CONTRACT_VERSION` (agentrt_policy/__init__.py) are what is particular to the
contract line, `agentrt:policy@0.5.0`. Layouts (wit/policy.wit, `observe-packed`, `observe-blocks`,
`score-packed`; the Rust SDK's `packed` module is the other implementation and the reference):

    block event, 3 words: [op | tier << 4 | position << 8 | agent << 32, block hash, parent hash]
    score item,  5 words: [key, session, last-access, tokens | agent << 32,
                           position | kind << 32 | tier << 40]
    event: a header [kind | payload words << 8 | flags << 16 | agent << 32] and its payload
           (every kind but agent-registered, which always comes typed through `observe`)
"""

from typing import Iterator, List

from wit_world.imports.types import (
    BlockEvent,
    BlockOp,
    Continuation,
    EndReason,
    EngineCapacity,
    EngineLoad,
    Event,
    Event_Block,
    Event_EngineCapacity,
    Event_EngineLoad,
    Event_Handoff,
    Event_RequestArrival,
    Event_RequestFinish,
    Event_SessionEnd,
    Event_SessionWait,
    Event_ToolCall,
    Event_ToolReturn,
    Handoff,
    Item,
    ItemKind,
    RequestArrival,
    RequestFinish,
    SessionEnd,
    SessionWait,
    Tier,
    ToolCall,
    ToolReturn,
    WaitKind,
)

WORDS_PER_EVENT = 3
ITEM_WORDS = 5
MAX_POSITION = (1 << 24) - 1
_U32 = 0xFFFF_FFFF

# The `event` case ordinals (the header's kind).
AGENT_REGISTERED, REQUEST_ARRIVAL, REQUEST_FINISH, TOOL_CALL, TOOL_RETURN = 0, 1, 2, 3, 4
SESSION_END, ENGINE_LOAD, BLOCK, SESSION_WAIT, HANDOFF, ENGINE_CAPACITY = 5, 6, 7, 8, 9, 10

_OPS = {op.value: op for op in BlockOp}
_TIERS = {tier.value: tier for tier in Tier}
_KINDS = {kind.value: kind for kind in ItemKind}
_REASONS = {reason.value: reason for reason in EndReason}
_WAITS = {kind.value: kind for kind in WaitKind}


def _block(head: int, block_hash: int, parent_hash: int):
    op = _OPS.get(head & 0x0F)
    tier = _TIERS.get((head >> 4) & 0x0F)
    if op is None or tier is None:
        return None
    return BlockEvent(
        op=op,
        agent=head >> 32,
        block_hash=block_hash,
        parent_hash=parent_hash,
        position=(head >> 8) & MAX_POSITION,
        tier=tier,
    )


def decode_blocks(words: List[int]) -> Iterator[BlockEvent]:
    """Block events from `observe-blocks` words. Ops and tiers this SDK does not know (a newer
    host) and trailing words that do not make a whole event are skipped, as in the Rust SDK."""
    for i in range(0, len(words) - WORDS_PER_EVENT + 1, WORDS_PER_EVENT):
        block = _block(words[i], words[i + 1], words[i + 2])
        if block is not None:
            yield block


def decode_items(words: List[int]) -> List[Item]:
    """Score items from `score-packed` words. Unknown kinds (a newer host) decode as kv-block,
    unknown tiers as host (a tier the policy cannot tell apart is not the one it ranks for free);
    trailing words that do not make a whole item are ignored (the host checks one score per item)."""
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
                tier=_TIERS.get((position_kind >> 40) & 0xFF, Tier.HOST),
            )
        )
    return items


def decode_events(words: List[int], blocks: bool = True, others: bool = True) -> Iterator[Event]:
    """Events from `observe-packed` words, oldest first, as the `Event_*` cases `observe` receives.
    Kinds this SDK does not know, payloads shorter than it reads, unknown reasons or wait kinds and
    a trailing partial event are skipped (the header says how many words to skip): an old policy
    keeps working against a newer host. `blocks=False` skips block events, `others=False` every
    other kind, without decoding them (for a policy that ignores them)."""
    at, end = 0, len(words)
    while at < end:
        head = words[at]
        size = (head >> 8) & 0xFF
        at += 1 + size
        if at > end:
            return
        if not (blocks if head & 0xFF == BLOCK else others):
            continue
        event = _event(head, words[at - size : at])
        if event is not None:
            yield event


def _event(head: int, p: List[int]):
    kind, flags, agent, n = head & 0xFF, (head >> 16) & 0xFFFF, head >> 32, len(p)
    if kind == REQUEST_ARRIVAL and n >= 6:
        continues = Continuation(shared_tokens=p[5] & _U32, previous_tokens=p[5] >> 32) if flags & 2 else None
        return Event_RequestArrival(RequestArrival(
            request_id=p[0], agent=agent, session=p[1], anchor_hash=p[2], prompt_tokens=p[4] & _U32,
            continues=continues, warmup=bool(flags & 1), at_us=p[3]))
    if kind == REQUEST_FINISH and n >= 5:
        return Event_RequestFinish(RequestFinish(
            request_id=p[0], agent=agent, session=p[1], prompt_tokens=p[3] & _U32, cached_tokens=p[3] >> 32,
            output_tokens=p[4] & _U32, warmup=bool(flags & 1), ok=bool(flags & 2), at_us=p[2]))
    if kind == TOOL_CALL and n >= 4:
        return Event_ToolCall(ToolCall(session=p[0], agent=agent, tool=p[1], args_hash=p[2], at_us=p[3]))
    if kind == TOOL_RETURN and n >= 5:
        return Event_ToolReturn(ToolReturn(
            session=p[0], agent=agent, tool=p[1], args_hash=p[2], result_tokens=p[4] & _U32, latency_us=p[3],
            ok=bool(flags & 1)))
    if kind == SESSION_END and n >= 2:
        reason = _REASONS.get(flags & 0xFF)
        return None if reason is None else Event_SessionEnd(SessionEnd(session=p[0], reason=reason, at_us=p[1]))
    if kind == ENGINE_LOAD and n >= 3:
        return Event_EngineLoad(EngineLoad(
            queue_depth=p[0] & _U32, running=p[0] >> 32, free_blocks=p[1] & _U32, total_blocks=p[1] >> 32,
            at_us=p[2]))
    if kind == BLOCK and n >= WORDS_PER_EVENT:
        block = _block(p[0], p[1], p[2])
        return None if block is None else Event_Block(block)
    if kind == SESSION_WAIT and n >= 4:
        wait = _WAITS.get(flags & 0xFF)
        return None if wait is None else Event_SessionWait(SessionWait(
            session=p[0], agent=agent, kind=wait, tool=p[1], expected_us=p[2], hinted=bool(flags & 0x100),
            at_us=p[3]))
    if kind == HANDOFF and n >= 3:
        return Event_Handoff(Handoff(session=p[0], from_agent=agent, to_agent=p[1] & _U32, at_us=p[2]))
    if kind == ENGINE_CAPACITY and n >= 5:
        return Event_EngineCapacity(EngineCapacity(
            capacity_tokens=p[0], resident_tokens=p[1], resident_sessions=p[2] & _U32, held_sessions=p[2] >> 32,
            prefill_us_per_ktoken=p[3] & _U32, decode_step_us=p[3] >> 32, at_us=p[4]))
    return None


# Encoders: the host's side of the layouts, for native tests (agentrt_policy.testing).


def block_words(block: BlockEvent) -> List[int]:
    """One block event's `observe-blocks` words."""
    head = block.op.value | (block.tier.value << 4) | (min(block.position, MAX_POSITION) << 8) | (block.agent << 32)
    return [head, block.block_hash, block.parent_hash]


def item_words(item: Item) -> List[int]:
    """One item's `score-packed` words."""
    return [
        item.key,
        item.session,
        item.last_access,
        item.tokens | (item.agent << 32),
        item.position | (item.kind.value << 32) | (item.tier.value << 40),
    ]


def _header(kind: int, payload: List[int], flags: int = 0, agent: int = 0) -> List[int]:
    return [kind | (len(payload) << 8) | (flags << 16) | (agent << 32), *payload]


def event_words(event: Event) -> List[int]:
    """One event's `observe-packed` words; empty for `agent-registered`, which the host always
    sends typed."""
    v = event.value
    if isinstance(event, Event_RequestArrival):
        shared, previous = (v.continues.shared_tokens, v.continues.previous_tokens) if v.continues else (0, 0)
        flags = int(v.warmup) | (int(v.continues is not None) << 1)
        payload = [v.request_id, v.session, v.anchor_hash, v.at_us, v.prompt_tokens, shared | (previous << 32)]
        return _header(REQUEST_ARRIVAL, payload, flags, v.agent)
    if isinstance(event, Event_RequestFinish):
        payload = [v.request_id, v.session, v.at_us, v.prompt_tokens | (v.cached_tokens << 32), v.output_tokens]
        return _header(REQUEST_FINISH, payload, int(v.warmup) | (int(v.ok) << 1), v.agent)
    if isinstance(event, Event_ToolCall):
        return _header(TOOL_CALL, [v.session, v.tool, v.args_hash, v.at_us], 0, v.agent)
    if isinstance(event, Event_ToolReturn):
        return _header(TOOL_RETURN, [v.session, v.tool, v.args_hash, v.latency_us, v.result_tokens], int(v.ok), v.agent)
    if isinstance(event, Event_SessionEnd):
        return _header(SESSION_END, [v.session, v.at_us], v.reason.value)
    if isinstance(event, Event_EngineLoad):
        payload = [v.queue_depth | (v.running << 32), v.free_blocks | (v.total_blocks << 32), v.at_us]
        return _header(ENGINE_LOAD, payload)
    if isinstance(event, Event_Block):
        return _header(BLOCK, block_words(v))
    if isinstance(event, Event_SessionWait):
        flags = v.kind.value | (int(v.hinted) << 8)
        return _header(SESSION_WAIT, [v.session, v.tool, v.expected_us, v.at_us], flags, v.agent)
    if isinstance(event, Event_Handoff):
        return _header(HANDOFF, [v.session, v.to_agent, v.at_us], 0, v.from_agent)
    if isinstance(event, Event_EngineCapacity):
        payload = [v.capacity_tokens, v.resident_tokens, v.resident_sessions | (v.held_sessions << 32),
                   v.prefill_us_per_ktoken | (v.decode_step_us << 32), v.at_us]
        return _header(ENGINE_CAPACITY, payload)
    return []
