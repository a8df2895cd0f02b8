/* __NAME__ natively, through the SDK's harness: `agentrt policy build --test` compiles and runs it
 * (`cargo xtask test` in an agentrt checkout). */

#include "testing/harness.h"

int main(void) {
    ARP_TEST("newest first until you change it") {
        free(arp_test_init(NULL, 0));
        arp_item items[] = {{.key = 1, .agent = 1, .last_access = 5, .tokens = 16},
                            {.key = 2, .agent = 1, .last_access = 9, .tokens = 16}};
        float scores[2];
        arp_test_score(items, 2, scores);
        ARP_CHECK(scores[1] > scores[0]);
    }
    return ARP_TESTS_DONE();
}
