/* addrtree.c: the red-black tree of addrtree.h. No red node has a red
 * child and every path from a node down to a NULL link meets as many black
 * nodes, so no path is longer than 2 log2(n + 1). Insert recolours upwards
 * only while it meets red uncles and rotates at most twice; remove rotates
 * at most three times: both are O(1) amortized, where an AVL tree's heights
 * change up to the root on most insert-remove pairs of a leaf. */
#include "addrtree.h"

static int
is_red(const addrnode *n)
{
    return n != NULL && n->red;
}

/* Points the link that held `old` (its parent's, or the root) at `new`. */
static void
replace_child(addrtree *t, addrnode *parent, const addrnode *old,
              addrnode *new)
{
    if (parent == NULL) {
        t->root = new;
    }
    else if (parent->left == old) {
        parent->left = new;
    }
    else {
        parent->right = new;
    }
    if (new != NULL) {
        new->parent = parent;
    }
}

/* Rotates n's right child above n. */
static void
rotate_left(addrtree *t, addrnode *n)
{
    addrnode *r = n->right;

    replace_child(t, n->parent, n, r);
    n->right = r->left;
    if (r->left != NULL) {
        r->left->parent = n;
    }
    r->left = n;
    n->parent = r;
}

static void
rotate_right(addrtree *t, addrnode *n)
{
    addrnode *l = n->left;

    replace_child(t, n->parent, n, l);
    n->left = l->right;
    if (l->right != NULL) {
        l->right->parent = n;
    }
    l->right = n;
    n->parent = l;
}

/* n is red and may have a red parent: moves that fault up while the
 * uncle is red (recolouring), then ends it with one or two rotations. */
static void
insert_fixup(addrtree *t, addrnode *n)
{
    addrnode *p;

    while ((p = n->parent) != NULL && p->red) {
        /* p is red, so not the root: g exists and is black. */
        addrnode *g = p->parent;
        addrnode *u = p == g->left ? g->right : g->left;

        if (is_red(u)) {
            p->red = u->red = 0;
            g->red = 1;
            n = g;
            continue;
        }
        if (p == g->left) {
            if (n == p->right) {
                rotate_left(t, p);
                p = n;
            }
            rotate_right(t, g);
        }
        else {
            if (n == p->left) {
                rotate_right(t, p);
                p = n;
            }
            rotate_left(t, g);
        }
        p->red = 0;
        g->red = 1;
        break;
    }
    t->root->red = 0;
}

/* Links n at `link`, an empty child link of parent (NULL: the root of an
 * empty tree), where the order puts it. */
static void
link_at(addrtree *t, addrnode *parent, addrnode **link, addrnode *n)
{
    n->left = n->right = NULL;
    n->parent = parent;
    n->red = 1;
    *link = n;
    if (parent == NULL || (parent == t->last && link == &parent->right)) {
        t->last = n;
    }
    if (parent == NULL || (parent == t->first && link == &parent->left)) {
        t->first = n;
    }
    t->n++;
    insert_fixup(t, n);
}

void
addrtree_insert(addrtree *t, addrnode *n)
{
    addrnode *parent = t->last, **link;

    if (parent != NULL && n->base >= parent->base) {
        /* The last node has no right child. */
        link_at(t, parent, &parent->right, n);
        return;
    }
    parent = t->first;
    if (parent != NULL && n->base < parent->base) {
        /* Nor the first a left one. */
        link_at(t, parent, &parent->left, n);
        return;
    }
    parent = NULL;
    link = &t->root;
    while (*link != NULL) {
        parent = *link;
        link = n->base < parent->base ? &parent->left : &parent->right;
    }
    link_at(t, parent, link, n);
}

void
addrtree_insert_before(addrtree *t, addrnode *next, addrnode *n)
{
    addrnode *parent;

    if (next == NULL) {
        parent = t->last;
        link_at(t, parent, parent != NULL ? &parent->right : &t->root, n);
    }
    else if (next->left == NULL) {
        link_at(t, next, &next->left, n);
    }
    else {
        /* next's predecessor, the rightmost of its left subtree. */
        for (parent = next->left; parent->right != NULL;) {
            parent = parent->right;
        }
        link_at(t, parent, &parent->right, n);
    }
}

/* The subtree at x (possibly NULL), parent's child, has one black node
 * fewer on its paths than its sibling's: borrows one from the sibling's
 * side by recolouring (moving the deficit up) or by rotations (ending it).
 */
static void
remove_fixup(addrtree *t, addrnode *x, addrnode *parent)
{
    while (x != t->root && !is_red(x)) {
        /* The sibling has a black height of at least 1: it exists. */
        if (x == parent->left) {
            addrnode *w = parent->right;

            if (w->red) {
                w->red = 0;
                parent->red = 1;
                rotate_left(t, parent);
                w = parent->right;
            }
            if (!is_red(w->left) && !is_red(w->right)) {
                w->red = 1;
                x = parent;
                parent = x->parent;
                continue;
            }
            if (!is_red(w->right)) {
                /* Its red near child rises in its place; the colours
                 * of both are set below. */
                rotate_right(t, w);
                w = parent->right;
            }
            w->red = parent->red;
            parent->red = 0;
            w->right->red = 0;
            rotate_left(t, parent);
        }
        else {
            addrnode *w = parent->left;

            if (w->red) {
                w->red = 0;
                parent->red = 1;
                rotate_right(t, parent);
                w = parent->left;
            }
            if (!is_red(w->left) && !is_red(w->right)) {
                w->red = 1;
                x = parent;
                parent = x->parent;
                continue;
            }
            if (!is_red(w->left)) {
                rotate_left(t, w);
                w = parent->left;
            }
            w->red = parent->red;
            parent->red = 0;
            w->left->red = 0;
            rotate_right(t, parent);
        }
        x = t->root;
    }
    if (x != NULL) {
        x->red = 0;
    }
}

void
addrtree_remove(addrtree *t, addrnode *n)
{
    addrnode *child, *parent;
    int red; /* the colour that leaves the tree */

    if (n == t->last) {
        /* It has no right child: its predecessor is near. */
        t->last = addrtree_prev(n);
    }
    if (n == t->first) {
        t->first = addrtree_next(n);
    }
    if (n->left != NULL && n->right != NULL) {
        /* Its successor, which has no left child, takes its place and
         * colour; the successor's old position is the one that empties. */
        addrnode *s = n->right;

        while (s->left != NULL) {
            s = s->left;
        }
        child = s->right;
        red = s->red;
        if (s->parent == n) {
            parent = s;
        }
        else {
            parent = s->parent;
            replace_child(t, s->parent, s, child);
            s->right = n->right;
            s->right->parent = s;
        }
        replace_child(t, n->parent, n, s);
        s->left = n->left;
        s->left->parent = s;
        s->red = n->red;
    }
    else {
        child = n->left != NULL ? n->left : n->right;
        parent = n->parent;
        red = n->red;
        replace_child(t, parent, n, child);
    }
    t->n--;
    n->left = n->right = n->parent = NULL;
    if (!red) {
        remove_fixup(t, child, parent);
    }
}

addrnode *
addrtree_first(const addrtree *t)
{
    return t->first;
}

addrnode *
addrtree_last(const addrtree *t)
{
    return t->last;
}

addrnode *
addrtree_next(const addrnode *n)
{
    if (n->right != NULL) {
        n = n->right;
        while (n->left != NULL) {
            n = n->left;
        }
        return (addrnode *)n;
    }
    while (n->parent != NULL && n->parent->right == n) {
        n = n->parent;
    }
    return n->parent;
}

addrnode *
addrtree_prev(const addrnode *n)
{
    if (n->left != NULL) {
        n = n->left;
        while (n->right != NULL) {
            n = n->right;
        }
        return (addrnode *)n;
    }
    while (n->parent != NULL && n->parent->left == n) {
        n = n->parent;
    }
    return n->parent;
}

addrnode *
addrtree_floor(const addrtree *t, uintptr_t addr)
{
    addrnode *n = t->root, *best = NULL;

    if (n == NULL || addr < t->first->base) {
        return NULL;
    }
    if (addr >= t->last->base) {
        return t->last;
    }
    while (n != NULL) {
        if (n->base <= addr) {
            best = n;
            n = n->right;
        }
        else {
            n = n->left;
        }
    }
    return best;
}

addrnode *
addrtree_find(const addrtree *t, uintptr_t addr)
{
    addrnode *n = addrtree_floor(t, addr);

    return n != NULL && addr - n->base < n->size ? n : NULL;
}

addrnode *
addrtree_after(const addrtree *t, uintptr_t addr)
{
    addrnode *n = t->root, *lo, *hi = NULL;

    if (n == NULL || addr < t->first->base) {
        return t->first;
    }
    if (addr >= t->last->base) {
        lo = t->last;
        return addr - lo->base < lo->size ? lo : NULL;
    }
    /* One descent finds both the floor (at least the first node) and its
     * successor (the last node it went left at), which a walk from the
     * floor would find again. */
    lo = t->first;
    while (n != NULL) {
        if (n->base <= addr) {
            lo = n;
            n = n->right;
        }
        else {
            hi = n;
            n = n->left;
        }
    }
    return addr - lo->base < lo->size ? lo : hi;
}
