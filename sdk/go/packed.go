package policy

// The packed forms the host uses on its hot paths (wit/policy.wit, `observe-blocks` and
// `score-packed`; the Rust SDK's packed.rs is the reference):
//
//	block event, 3 words: [op | position << 8 | agent << 32, block hash, parent hash]
//	score item,  5 words: [key, session, last-access, tokens | agent << 32, position | kind << 32]

const (
	WordsPerEvent = 3
	ItemWords     = 5
	// MaxPosition is where a packed block event's position saturates.
	MaxPosition = 1<<24 - 1
)

// DecodeBlock decodes one packed block event (3 words); false for an op this SDK does not know
// (a newer host): skip it.
func DecodeBlock(words []uint64) (BlockEvent, bool) {
	head := words[0]
	op := BlockOp(head & 0xff)
	if op > AllCleared {
		return BlockEvent{}, false
	}
	return BlockEvent{
		Op:         op,
		Agent:      uint32(head >> 32),
		BlockHash:  words[1],
		ParentHash: words[2],
		Position:   uint32(head>>8) & MaxPosition,
	}, true
}

// DecodeItem decodes one packed item (5 words); unknown kinds decode as KvBlock.
func DecodeItem(words []uint64) Item {
	kind := ItemKind(words[4] >> 32 & 0xff)
	if kind > ToolResult {
		kind = KvBlock
	}
	return Item{
		Kind:       kind,
		Key:        words[0],
		Agent:      uint32(words[3] >> 32),
		Session:    words[1],
		LastAccess: words[2],
		Tokens:     uint32(words[3]),
		Position:   uint32(words[4]),
	}
}

// DecodeBlocks decodes packed block events, skipping unknown ops and trailing words that do not
// make a whole event.
func DecodeBlocks(words []uint64) []BlockEvent {
	blocks := make([]BlockEvent, 0, len(words)/WordsPerEvent)
	for i := 0; i+WordsPerEvent <= len(words); i += WordsPerEvent {
		if b, ok := DecodeBlock(words[i : i+WordsPerEvent]); ok {
			blocks = append(blocks, b)
		}
	}
	return blocks
}

// DecodeItems decodes packed items; trailing words that do not make a whole item are ignored
// (the host checks one score per item).
func DecodeItems(words []uint64) []Item {
	items := make([]Item, 0, len(words)/ItemWords)
	for i := 0; i+ItemWords <= len(words); i += ItemWords {
		items = append(items, DecodeItem(words[i:i+ItemWords]))
	}
	return items
}

// EncodeBlocks packs block events as the host does (for tests).
func EncodeBlocks(blocks []BlockEvent) []uint64 {
	words := make([]uint64, 0, len(blocks)*WordsPerEvent)
	for _, b := range blocks {
		position := uint64(b.Position)
		if position > MaxPosition {
			position = MaxPosition
		}
		words = append(words, uint64(b.Op)|position<<8|uint64(b.Agent)<<32, b.BlockHash, b.ParentHash)
	}
	return words
}

// EncodeItems packs items as the host does (for tests).
func EncodeItems(items []Item) []uint64 {
	words := make([]uint64, 0, len(items)*ItemWords)
	for _, it := range items {
		words = append(words, it.Key, it.Session, it.LastAccess,
			uint64(it.Tokens)|uint64(it.Agent)<<32, uint64(it.Position)|uint64(it.Kind)<<32)
	}
	return words
}
