// __NAME__ natively, through the SDK's harness: `go test` here, or `cargo xtask test`.
package __PACKAGE__

import (
	"testing"

	"agentrt.dev/policy"
	"agentrt.dev/policy/policytest"
)

func TestNewestFirstUntilYouChangeIt(t *testing.T) {
	h, err := policytest.New(New)
	if err != nil {
		t.Fatal(err)
	}
	scores := h.Score(policy.Item{Key: 1, Agent: 1, LastAccess: 5}, policy.Item{Key: 2, Agent: 1, LastAccess: 9})
	if scores[1] <= scores[0] {
		t.Fatal(scores)
	}
}
