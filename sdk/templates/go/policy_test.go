// __NAME__ natively, through the SDK's harness: `agentrt policy build --test` runs it (`cargo xtask
// test` in an agentrt checkout).
package __PACKAGE__

import (
	"testing"

	"agentrt.dev/policy/policytest"
)

func TestNewestFirstUntilYouChangeIt(t *testing.T) {
	h, err := policytest.New(New)
	if err != nil {
		t.Fatal(err)
	}
	scores := h.Score(policytest.GpuBlock(1, 5), policytest.GpuBlock(2, 9))
	if scores[1] <= scores[0] {
		t.Fatal(scores)
	}
}
