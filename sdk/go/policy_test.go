package policy_test

import (
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"agentrt.dev/policy"
	"agentrt.dev/policy/policytest"
)

func TestPackedFormsRoundTripAndMatchTheLayout(t *testing.T) {
	blocks := []policy.BlockEvent{
		{Op: policy.Touched, Agent: 7, BlockHash: 1 << 63, ParentHash: 5, Position: 48},
		{Op: policy.AllCleared},
	}
	words := policy.EncodeBlocks(blocks)
	if words[0] != 1|48<<8|7<<32 {
		t.Fatalf("word 0 of a block event: %#x", words[0])
	}
	if got := policy.DecodeBlocks(words); !reflect.DeepEqual(got, blocks) {
		t.Fatalf("blocks: %+v", got)
	}
	// An op this SDK does not know is skipped; trailing words are ignored.
	if got := policy.DecodeBlocks(append([]uint64{9, 1, 2}, words[:4]...)); !reflect.DeepEqual(got, blocks[:1]) {
		t.Fatalf("unknown op: %+v", got)
	}
	// Positions saturate at 2^24 - 1.
	big := policy.DecodeBlocks(policy.EncodeBlocks([]policy.BlockEvent{{Position: 1 << 30}}))
	if big[0].Position != policy.MaxPosition {
		t.Fatalf("position %d", big[0].Position)
	}
	items := []policy.Item{
		{Kind: policy.ToolResult, Key: 1, Agent: 1 << 31, Session: 3, LastAccess: 1 << 40, Tokens: 16, Position: 32},
	}
	packed := policy.EncodeItems(items)
	if packed[3] != 16|1<<63 || packed[4] != 32|2<<32 {
		t.Fatalf("item words %#x", packed)
	}
	if got := policy.DecodeItems(append(packed, 1, 2)); !reflect.DeepEqual(got, items) {
		t.Fatalf("items: %+v", got)
	}
	packed[4] = 9 << 32
	if policy.DecodeItems(packed)[0].Kind != policy.KvBlock {
		t.Fatal("an unknown kind decodes as kv-block")
	}
}

func TestConfigNamesTheKey(t *testing.T) {
	c := policy.NewConfig([][2]string{{"a", "12"}, {"b", "x"}, {"a", "13"}, {"c", "-1"}, {"d", "99"}})
	if v, err := c.Uint("a", 0, 0, 100); v != 13 || err != nil {
		t.Fatalf("the last value wins: %d %v", v, err)
	}
	if v, err := c.Uint("missing", 5, 0, 1); v != 5 || err != nil {
		t.Fatalf("fallback: %d %v", v, err)
	}
	for key, words := range map[string]string{"b": "not a whole number", "c": "not a whole number", "d": "outside 0..=10"} {
		if _, err := c.Uint(key, 0, 0, 10); err == nil || !strings.Contains(err.Error(), "config key "+key+": ") || !strings.Contains(err.Error(), words) {
			t.Fatalf("%s: %v", key, err)
		}
	}
	err := c.ExpectOnly("a", "b")
	if err == nil || err.Error() != "unknown config key(s) c, d; known: a, b" {
		t.Fatalf("%v", err)
	}
	if f, err := policy.NewConfig([][2]string{{"f", "0.5"}}).Float("f", 0, 0, 1); f != 0.5 || err != nil {
		t.Fatalf("%v %v", f, err)
	}
}

func TestSnapshotsUseTheRustLayoutAndReportDamage(t *testing.T) {
	state := policy.NewWriter("TEST", 2).U8(1).U16(2).U32(3).U64(4).F32(0.5).Bool(true).Bytes()
	want := []byte{'T', 'E', 'S', 'T', 2, 0, 1, 2, 0, 3, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x3f, 1}
	if !reflect.DeepEqual(state, want) {
		t.Fatalf("%v", state)
	}
	r, version, err := policy.OpenReader(state, "TEST")
	if err != nil || version != 2 {
		t.Fatal(version, err)
	}
	if r.U8() != 1 || r.U16() != 2 || r.U32() != 3 || r.U64() != 4 || r.F32() != 0.5 || !r.Bool() || r.Finish() != nil {
		t.Fatal("round trip")
	}
	if _, _, err := policy.OpenReader(state, "XXXX"); err == nil || !strings.Contains(err.Error(), "not from this policy") {
		t.Fatal(err)
	}
	r, _, _ = policy.OpenReader(state[:8], "TEST")
	r.U64()
	r.U8()
	if err := r.Finish(); err == nil || err.Error() != "snapshot is truncated" {
		t.Fatal(err)
	}
	r, _, _ = policy.OpenReader(state, "TEST")
	if err := r.Finish(); err == nil || !strings.Contains(err.Error(), "20 unexpected trailing bytes") {
		t.Fatal(err)
	}
}

// minimal implements only Info and Score: every other export has its default.
type minimal struct{}

func (minimal) Info() policy.Info { return policy.Info{Name: "minimal", Version: "0.1.0"} }
func (minimal) Score(items []policy.Item, scores []float32) {
	policy.RecencyScores(items, scores)
}

func TestDefaultsForEveryHookNotImplemented(t *testing.T) {
	newMinimal := func() policy.Policy { return minimal{} }
	if _, err := policytest.New(newMinimal, [2]string{"x", "1"}); err == nil || !strings.Contains(err.Error(), "x; known: none") {
		t.Fatal(err)
	}
	h, err := policytest.New(newMinimal)
	if err != nil {
		t.Fatal(err)
	}
	h.Observe(&policy.SessionEnd{Session: 1}, &policy.BlockEvent{Op: policy.Stored})
	h.ObserveBlocks(policy.BlockEvent{Op: policy.Touched})
	if h.Act() != nil || h.Predict(4) != nil || h.Snapshot() != nil || h.Restore(nil) != nil {
		t.Fatal("neutral defaults")
	}
	if err := h.Restore([]byte{1}); err == nil || !strings.Contains(err.Error(), "keeps no state") {
		t.Fatal(err)
	}
	items := []policy.Item{{LastAccess: 5}, {LastAccess: 9}, {LastAccess: 9}, {LastAccess: 1}}
	scores := h.Score(items...)
	if !reflect.DeepEqual(scores, []float32{4, 8, 8, 0}) {
		t.Fatal(scores)
	}
	if order := policytest.Rank(items, scores); !reflect.DeepEqual(order, []int{1, 2, 0, 3}) {
		t.Fatal(order)
	}
}

func TestTheRankingRuleIsTheHosts(t *testing.T) {
	// sdk/src/ranking.rs's own case.
	nan := float32(0)
	nan = nan / nan
	items := []policy.Item{{LastAccess: 10}, {LastAccess: 30}, {LastAccess: 20}, {LastAccess: 40}, {LastAccess: 50}}
	if order := policytest.Rank(items, []float32{1, 1, 2, nan, 1}); !reflect.DeepEqual(order, []int{2, 4, 1, 0, 3}) {
		t.Fatal(order)
	}
}

// sdk/conformance/recency_scores.txt: the same batches, the same scores, in all five SDKs.
func TestRecencyScoresGiveTheCasesEverySDKGives(t *testing.T) {
	text, err := os.ReadFile("../conformance/recency_scores.txt")
	if err != nil {
		t.Fatal(err)
	}
	cases := 0
	for _, line := range strings.Split(string(text), "\n") {
		left, right, found := strings.Cut(line, "->")
		if strings.HasPrefix(line, "#") || !found {
			continue
		}
		var items []policy.Item
		for _, w := range strings.Fields(left) {
			v, err := strconv.ParseUint(w, 10, 64)
			if err != nil {
				t.Fatal(line, err)
			}
			items = append(items, policy.Item{LastAccess: v})
		}
		var want []float32
		for _, w := range strings.Fields(right) {
			v, err := strconv.ParseFloat(w, 64)
			if err != nil {
				t.Fatal(line, err)
			}
			want = append(want, float32(v))
		}
		got := make([]float32, len(items))
		policy.RecencyScores(items, got)
		if len(want) != len(got) || (len(got) > 0 && !reflect.DeepEqual(got, want)) {
			t.Fatalf("%q: got %v", line, got)
		}
		cases++
	}
	if cases < 8 {
		t.Fatalf("only %d cases", cases)
	}
}
