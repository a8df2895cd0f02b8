/* __NAME__ natively, through the SDK's harness: `cargo xtask test` compiles and runs it. */

#include "testing/harness.h"

int main(void) {
    ARP_TEST("newest first until you change it") {
        free(arp_test_init(NULL, 0));
        arp_item items[] = {{0, 1, 1, 0, 5, 16, 0}, {0, 2, 1, 0, 9, 16, 0}};
        float scores[2];
        arp_test_score(items, 2, scores);
        ARP_CHECK(scores[1] > scores[0]);
    }
    return ARP_TESTS_DONE();
}
