/* addrtree.h: an intrusive red-black tree of address ranges
 * [base, base + size), ordered by base: insert, remove and the range
 * containing (or the first ending after) an address in O(log n), with
 * O(1) amortized rebalancing per change. Depends on nothing of the project
 * and takes no lock: its owner serializes every call on one tree. Core's
 * host registrations and the simulator's allocation table build on it. */
#ifndef CM_LIB_ADDRTREE_H
#define CM_LIB_ADDRTREE_H

#include <stddef.h>
#include <stdint.h>

/* Embedded in the owner's record; the owner sets base and size before
 * addrtree_insert and keeps them while the node is in a tree. */
typedef struct addrnode {
    struct addrnode *left, *right, *parent;
    uintptr_t base;
    size_t size;
    int red; /* the node's colour: 1 red, 0 black */
} addrnode;

/* Zero-initialized when empty. The ends are kept so that a range above
 * or below all the others goes in, and an address outside them is looked
 * up, without a walk from the root: fresh memory tends to come at one end
 * (device addresses upward, mmap's pages downward). */
typedef struct addrtree {
    addrnode *root;
    addrnode *first, *last;
    size_t n;
} addrtree;

/* The record holding node `n` as member `field`. */
#define ADDRTREE_ENTRY(n, type, field)                                        \
    ((type *)((char *)(n) - offsetof(type, field)))

/* Links n by n->base; an equal base goes after those already in. A base
 * at or above the last one's, or below the first one's, takes O(1)
 * amortized. */
void addrtree_insert(addrtree *t, addrnode *n);

/* Links n just before `next` (NULL: after the last node) without a
 * search from the root, for a caller that found next already (the first
 * node ending after n's base, with the ranges disjoint): the order is the
 * caller's to keep. Walks at most down to next's predecessor. */
void addrtree_insert_before(addrtree *t, addrnode *next, addrnode *n);

/* Unlinks n, which is in t. */
void addrtree_remove(addrtree *t, addrnode *n);

/* The first and last nodes by base (in O(1)), and n's neighbours; NULL
 * past an end. */
addrnode *addrtree_first(const addrtree *t);
addrnode *addrtree_last(const addrtree *t);
addrnode *addrtree_next(const addrnode *n);
addrnode *addrtree_prev(const addrnode *n);

/* The last node whose base is at most addr, or NULL. */
addrnode *addrtree_floor(const addrtree *t, uintptr_t addr);

/* The range containing addr, or NULL (ranges disjoint). */
addrnode *addrtree_find(const addrtree *t, uintptr_t addr);

/* The first range that ends after addr: the one containing it, else the
 * first above it; NULL if none (ranges disjoint). */
addrnode *addrtree_after(const addrtree *t, uintptr_t addr);

#endif
