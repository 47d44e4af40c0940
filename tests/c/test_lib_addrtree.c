/* test_lib_addrtree.c: lib/addrtree.c alone, against brute force: random
 * inserts, removes and lookups of disjoint ranges, each step followed by
 * the tree's red-black invariants (order, parent links, a black root, no
 * red node with a red child, one black height on every path, the count)
 * and each lookup compared with a scan of the ranges in. */
#include "addrtree.h"
#include "check.h"

#include <stdint.h>
#include <stdlib.h>

#define SLOTS 512 /* ranges live at once, at most */
#define SLOT 16   /* bytes of address space per slot */

typedef struct range {
    addrnode link;
    int in;
} range;

static range ranges[SLOTS];

/* xorshift64: the same draws on every run. */
static uint64_t rng = 0x9e3779b97f4a7c15u;

static unsigned
draw(unsigned below)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % below);
}

/* Checks n's subtree; returns its black height (NULL links count 0), and
 * its node count in *count and longest path in nodes in *depth. */
static int
check_subtree(const addrnode *n, const addrnode *parent, size_t *count,
              int *depth)
{
    size_t nl = 0, nr = 0;
    int bl, br, dl = 0, dr = 0;

    if (n == NULL) {
        *count = 0;
        *depth = 0;
        return 0;
    }
    CHECK_PTR_EQ(n->parent, parent);
    CHECK_TRUE(n->red == 0 || n->red == 1);
    if (n->left != NULL) {
        CHECK_LE(n->left->base, n->base);
    }
    if (n->right != NULL) {
        CHECK_GE(n->right->base, n->base);
    }
    if (n->red) {
        CHECK_TRUE(n->left == NULL || !n->left->red);
        CHECK_TRUE(n->right == NULL || !n->right->red);
    }
    bl = check_subtree(n->left, n, &nl, &dl);
    br = check_subtree(n->right, n, &nr, &dr);
    CHECK_INT_EQ(bl, br);
    *count = nl + nr + 1;
    *depth = (dl > dr ? dl : dr) + 1;
    return bl + !n->red;
}

/* The longest path from the root, in nodes. */
static int
tree_depth(const addrtree *t)
{
    size_t count;
    int depth;

    (void)check_subtree(t->root, NULL, &count, &depth);
    return depth;
}

/* The invariants, and the in-order walk equal to the ranges in, by base. */
static void
check_tree(const addrtree *t)
{
    const addrnode *n, *prev = NULL;
    size_t count, in = 0;
    int depth;

    (void)check_subtree(t->root, NULL, &count, &depth);
    CHECK_TRUE(t->root == NULL || !t->root->red);
    /* The kept first node is the leftmost one. */
    for (n = t->root; n != NULL && n->left != NULL;) {
        n = n->left;
    }
    CHECK_PTR_EQ(addrtree_first(t), n);
    CHECK_UINT_EQ(count, t->n);
    for (size_t i = 0; i < SLOTS; i++) {
        if (!ranges[i].in) {
            continue;
        }
        in++;
        CHECK_PTR_EQ(n, &ranges[i].link);
        if (n == NULL) {
            return;
        }
        CHECK_PTR_EQ(addrtree_prev(n), prev);
        prev = n;
        n = addrtree_next(n);
    }
    CHECK_PTR_EQ(n, NULL);
    CHECK_PTR_EQ(addrtree_last(t), prev);
    CHECK_UINT_EQ(t->n, in);
}

/* Brute force: the range containing addr, the first ending after it and
 * the last starting at or below it. */
static void
reference(uintptr_t addr, addrnode **find, addrnode **after, addrnode **floor)
{
    *find = *after = *floor = NULL;
    for (size_t i = 0; i < SLOTS; i++) {
        addrnode *n = &ranges[i].link;

        if (!ranges[i].in) {
            continue;
        }
        if (n->base <= addr) {
            *floor = n;
        }
        if (n->base <= addr && addr < n->base + n->size) {
            *find = n;
        }
        if (*after == NULL && addr < n->base + n->size) {
            *after = n;
        }
    }
}

/* The range in after slot i (brute force), or NULL. */
static addrnode *
next_in(unsigned i)
{
    while (++i < SLOTS) {
        if (ranges[i].in) {
            return &ranges[i].link;
        }
    }
    return NULL;
}

static void
check_lookups(const addrtree *t, uintptr_t addr)
{
    addrnode *find, *after, *floor;

    reference(addr, &find, &after, &floor);
    CHECK_PTR_EQ(addrtree_find(t, addr), find);
    CHECK_PTR_EQ(addrtree_after(t, addr), after);
    CHECK_PTR_EQ(addrtree_floor(t, addr), floor);
}

static void
test_empty(void)
{
    addrtree t = {0};

    CHECK_PTR_EQ(addrtree_first(&t), NULL);
    CHECK_PTR_EQ(addrtree_last(&t), NULL);
    CHECK_PTR_EQ(addrtree_find(&t, 0), NULL);
    CHECK_PTR_EQ(addrtree_after(&t, 0), NULL);
    CHECK_PTR_EQ(addrtree_floor(&t, UINTPTR_MAX), NULL);
}

/* Edges of one range: its first and last byte, and either side. */
static void
test_one(void)
{
    addrtree t = {0};
    range *r = &ranges[3];

    r->link.base = 3 * SLOT + 2;
    r->link.size = 5;
    r->in = 1;
    addrtree_insert(&t, &r->link);
    check_tree(&t);
    CHECK_PTR_EQ(addrtree_find(&t, r->link.base - 1), NULL);
    CHECK_PTR_EQ(addrtree_find(&t, r->link.base), &r->link);
    CHECK_PTR_EQ(addrtree_find(&t, r->link.base + 4), &r->link);
    CHECK_PTR_EQ(addrtree_find(&t, r->link.base + 5), NULL);
    CHECK_PTR_EQ(addrtree_after(&t, 0), &r->link);
    CHECK_PTR_EQ(addrtree_after(&t, r->link.base + 4), &r->link);
    CHECK_PTR_EQ(addrtree_after(&t, r->link.base + 5), NULL);
    addrtree_remove(&t, &r->link);
    r->in = 0;
    check_tree(&t);
    CHECK_PTR_EQ(t.root, NULL);
}

/* Ascending and descending inserts stay balanced: depth within the
 * red-black bound 2 log2(n + 1), 18 for 512 nodes. */
static void
test_sorted(void)
{
    addrtree t = {0};

    for (size_t i = 0; i < SLOTS; i++) {
        ranges[i].link.base = i * SLOT;
        ranges[i].link.size = SLOT;
        ranges[i].in = 1;
        addrtree_insert(&t, &ranges[i].link);
    }
    check_tree(&t);
    CHECK_LE(tree_depth(&t), 18);
    for (size_t i = SLOTS; i-- > 0;) {
        addrtree_remove(&t, &ranges[i].link);
        ranges[i].in = 0;
        if (i % 64 == 0) {
            check_tree(&t);
        }
    }
    CHECK_PTR_EQ(t.root, NULL);
    for (size_t i = SLOTS; i-- > 0;) {
        ranges[i].in = 1;
        addrtree_insert(&t, &ranges[i].link);
    }
    check_tree(&t);
    CHECK_LE(tree_depth(&t), 18);
    for (size_t i = 0; i < SLOTS; i++) {
        addrtree_remove(&t, &ranges[i].link);
        ranges[i].in = 0;
    }
    CHECK_PTR_EQ(t.root, NULL);
    CHECK_PTR_EQ(addrtree_last(&t), NULL);
    /* Appends before NULL (after the last), then descending inserts each
     * before the previous one. */
    for (size_t i = 0; i < SLOTS / 2; i++) {
        ranges[i].in = 1;
        addrtree_insert_before(&t, NULL, &ranges[i].link);
    }
    for (size_t i = SLOTS; i-- > SLOTS / 2;) {
        ranges[i].in = 1;
        addrtree_insert_before(&t, next_in((unsigned)i), &ranges[i].link);
    }
    check_tree(&t);
    CHECK_LE(tree_depth(&t), 18);
}

/* Random steps: insert a range into a free slot (by a search, or before
 * its successor as a caller that found it would), remove a random one,
 * look up random addresses, each followed by the invariants. */
static void
test_random(void)
{
    addrtree t = {0};
    size_t inserts = 0, hinted = 0, removes = 0;

    for (int step = 0; step < 40000; step++) {
        unsigned op = draw(10), i = draw(SLOTS);
        range *r = &ranges[i];

        /* Fill to about half, then hover there, then drain. */
        if (step > 30000) {
            op = op < 2 ? 0 : 5;
        }
        if (op < 4 && !r->in) {
            unsigned off = draw(SLOT);

            r->link.base = (uintptr_t)i * SLOT + off;
            r->link.size = 1 + draw(SLOT - off);
            if (draw(2)) {
                addrtree_insert_before(&t, next_in(i), &r->link);
                hinted++;
            }
            else {
                addrtree_insert(&t, &r->link);
            }
            r->in = 1;
            inserts++;
        }
        else if (op >= 4 && op < 7 && r->in) {
            addrtree_remove(&t, &r->link);
            r->in = 0;
            removes++;
        }
        else {
            for (int k = 0; k < 4; k++) {
                check_lookups(&t, draw(SLOTS * SLOT + SLOT));
            }
        }
        if (step % 8 == 0 || step > 39000) {
            check_tree(&t);
        }
    }
    check_tree(&t);
    /* The draws exercised both operations many times over. */
    CHECK_GT(inserts, 5000);
    CHECK_GT(hinted, 2000);
    CHECK_GT(inserts - hinted, 2000);
    CHECK_GT(removes, 5000);
}

/* Equal bases (empty and non-empty ranges at one address) keep the order
 * they went in, and each one removes alone. */
static void
test_equal_bases(void)
{
    addrtree t = {0};

    for (size_t i = 0; i < 8; i++) {
        ranges[i].link.base = 64;
        ranges[i].link.size = i;
        ranges[i].in = 1;
        addrtree_insert(&t, &ranges[i].link);
    }
    check_tree(&t);
    addrtree_remove(&t, &ranges[4].link);
    ranges[4].in = 0;
    check_tree(&t);
    CHECK_PTR_EQ(addrtree_floor(&t, 64), &ranges[7].link);
}

static const check_test tests[] = {
    {"empty", test_empty, 0},
    {"one", test_one, 0},
    {"sorted", test_sorted, 0},
    {"random", test_random, 0},
    {"equal_bases", test_equal_bases, 0},
    {NULL, NULL, 0},
};

CHECK_MAIN(tests, NULL, NULL)
