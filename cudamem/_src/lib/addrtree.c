/* addrtree.c: the AVL tree of addrtree.h. Each node keeps its subtree's
 * height; insert and remove rebalance on the way up from the change, so
 * every path stays within 1.44 log2(n) nodes, and stop where a subtree's
 * height is what it was (most changes touch a node or two). */
#include "addrtree.h"

static int
height(const addrnode *n)
{
    return n != NULL ? n->height : 0;
}

static void
update(addrnode *n)
{
    int l = height(n->left), r = height(n->right);

    n->height = (l > r ? l : r) + 1;
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

/* Rotates n's right child above n; returns that child. */
static addrnode *
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
    update(n);
    update(r);
    return r;
}

static addrnode *
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
    update(n);
    update(l);
    return l;
}

/* Restores heights and balance from n up towards the root. */
static void
rebalance(addrtree *t, addrnode *n)
{
    while (n != NULL) {
        int l = height(n->left), r = height(n->right);
        int before = n->height;

        if (l - r > 1) {
            if (height(n->left->left) < height(n->left->right)) {
                (void)rotate_left(t, n->left);
            }
            n = rotate_right(t, n);
        }
        else if (r - l > 1) {
            if (height(n->right->right) < height(n->right->left)) {
                (void)rotate_right(t, n->right);
            }
            n = rotate_left(t, n);
        }
        else {
            n->height = (l > r ? l : r) + 1;
        }
        /* The ancestors' heights were computed from `before`: when the
         * subtree is as high as that, none of them changes. */
        if (n->height == before) {
            break;
        }
        n = n->parent;
    }
}

void
addrtree_insert(addrtree *t, addrnode *n)
{
    addrnode *parent = NULL, **link = &t->root;

    while (*link != NULL) {
        parent = *link;
        link = n->base < parent->base ? &parent->left : &parent->right;
    }
    n->left = n->right = NULL;
    n->parent = parent;
    n->height = 1;
    *link = n;
    t->n++;
    rebalance(t, parent);
}

void
addrtree_remove(addrtree *t, addrnode *n)
{
    addrnode *from;

    if (n->left != NULL && n->right != NULL) {
        /* Its successor, which has no left child, takes its place. */
        addrnode *s = n->right;

        while (s->left != NULL) {
            s = s->left;
        }
        if (s->parent == n) {
            from = s;
        }
        else {
            from = s->parent;
            replace_child(t, s->parent, s, s->right);
            s->right = n->right;
            s->right->parent = s;
        }
        replace_child(t, n->parent, n, s);
        s->left = n->left;
        s->left->parent = s;
        /* n's height, which its ancestors were computed from, so that
         * rebalance can stop where a height no longer changes. */
        s->height = n->height;
    }
    else {
        from = n->parent;
        replace_child(t, n->parent, n, n->left != NULL ? n->left : n->right);
    }
    t->n--;
    n->left = n->right = n->parent = NULL;
    rebalance(t, from);
}

addrnode *
addrtree_first(const addrtree *t)
{
    addrnode *n = t->root;

    while (n != NULL && n->left != NULL) {
        n = n->left;
    }
    return n;
}

addrnode *
addrtree_last(const addrtree *t)
{
    addrnode *n = t->root;

    while (n != NULL && n->right != NULL) {
        n = n->right;
    }
    return n;
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
    addrnode *n = addrtree_floor(t, addr);

    if (n == NULL) {
        return addrtree_first(t);
    }
    return addr - n->base < n->size ? n : addrtree_next(n);
}
