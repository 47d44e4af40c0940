/* check.h: the C tests' checks and runner. A check that fails prints
 * file:line, the expressions' text and, for the typed checks, both values;
 * each test process counts its checks. A test file lists its tests and
 * ends with CHECK_MAIN:
 *
 *     static const check_test tests[] = {
 *         {"name", test_fn, 0}, ..., {NULL, NULL, 0}};
 *     CHECK_MAIN(tests, setup, teardown)
 *
 * `prog` runs every test in a forked process of its own and reports each,
 * so that a crash names its test and the others still run; `prog NAME`
 * runs that test in this process (for a debugger); `prog NAME...` forks
 * for each named; `prog --list` prints the names. setup and teardown
 * (NULL for none) run around each test in its process, unless its flags
 * say CHECK_BARE. A test passes when its process exits 0: no check failed
 * and nothing crashed. */
#ifndef CM_TEST_CHECK_H
#define CM_TEST_CHECK_H

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int check_passed, check_failed;

/* The outcome of one check; returns ok. */
static inline int
check_note_(int ok, const char *file, int line, const char *what)
{
    if (ok) {
        check_passed++;
    }
    else {
        check_failed++;
        fprintf(stderr, "%s:%d: %s failed\n", file, line, what);
    }
    return ok;
}

/* One operand's value, in its type's format. */
static inline void
check_show_ll_(const char *text, long long v)
{
    fprintf(stderr, "    %s = %lld\n", text, v);
}

static inline void
check_show_ull_(const char *text, unsigned long long v)
{
    fprintf(stderr, "    %s = %llu (%#llx)\n", text, v, v);
}

static inline void
check_show_ld_(const char *text, long double v)
{
    fprintf(stderr, "    %s = %.21Lg\n", text, v);
}

static inline void
check_show_ptr_(const char *text, const void *v)
{
    fprintf(stderr, "    %s = %p\n", text, v);
}

static inline void
check_show_str_(const char *text, const char *v)
{
    if (v == NULL) {
        fprintf(stderr, "    %s = NULL\n", text);
    }
    else {
        fprintf(stderr, "    %s = \"%s\"\n", text, v);
    }
}

/* Shows a value of any scalar type: integers as such, pointers as
 * addresses. */
#define CHECK_SHOW_(text, v)                                                  \
    _Generic((v),                                                             \
        _Bool: check_show_ll_,                                                \
        char: check_show_ll_,                                                 \
        signed char: check_show_ll_,                                          \
        short: check_show_ll_,                                                \
        int: check_show_ll_,                                                  \
        long: check_show_ll_,                                                 \
        long long: check_show_ll_,                                            \
        unsigned char: check_show_ull_,                                       \
        unsigned short: check_show_ull_,                                      \
        unsigned: check_show_ull_,                                            \
        unsigned long: check_show_ull_,                                       \
        unsigned long long: check_show_ull_,                                  \
        float: check_show_ld_,                                                \
        double: check_show_ld_,                                               \
        long double: check_show_ld_,                                          \
        default: check_show_ptr_)(text, v)

/* A condition, printed as written. */
#define CHECK_TRUE(cond)                                                      \
    ((void)check_note_((cond) ? 1 : 0, __FILE__, __LINE__,                    \
                       "CHECK_TRUE(" #cond ")"))

/* a OP b, each operand evaluated once and compared as C compares them
 * (so without -Wsign-compare: a constant operand is now a variable); on
 * failure both values are shown in their types' formats. */
#define CHECK_CMP_(a, op, b, name, ta, tb)                                    \
    do {                                                                      \
        __auto_type check_a_ = (a);                                           \
        __auto_type check_b_ = (b);                                           \
        _Pragma("GCC diagnostic push")                                        \
            _Pragma("GCC diagnostic ignored \"-Wsign-compare\"") int          \
                check_ok_ = check_a_ op check_b_;                             \
        _Pragma("GCC diagnostic pop") if (!check_note_(                       \
                                              check_ok_, __FILE__, __LINE__,  \
                                              name "(" ta ", " tb ")"))       \
        {                                                                     \
            CHECK_SHOW_(ta, check_a_);                                        \
            CHECK_SHOW_(tb, check_b_);                                        \
        }                                                                     \
    } while (0)

#define CHECK_EQ(a, b) CHECK_CMP_(a, ==, b, "CHECK_EQ", #a, #b)
#define CHECK_NE(a, b) CHECK_CMP_(a, !=, b, "CHECK_NE", #a, #b)
#define CHECK_LT(a, b) CHECK_CMP_(a, <, b, "CHECK_LT", #a, #b)
#define CHECK_LE(a, b) CHECK_CMP_(a, <=, b, "CHECK_LE", #a, #b)
#define CHECK_GT(a, b) CHECK_CMP_(a, >, b, "CHECK_GT", #a, #b)
#define CHECK_GE(a, b) CHECK_CMP_(a, >=, b, "CHECK_GE", #a, #b)

/* Equality after conversion to one type: signed, unsigned, pointer. */
#define CHECK_INT_EQ(a, b)                                                    \
    CHECK_CMP_((long long)(a), ==, (long long)(b), "CHECK_INT_EQ", #a, #b)
#define CHECK_UINT_EQ(a, b)                                                   \
    CHECK_CMP_((unsigned long long)(a), ==, (unsigned long long)(b),          \
               "CHECK_UINT_EQ", #a, #b)
#define CHECK_PTR_EQ(a, b)                                                    \
    CHECK_CMP_((const void *)(a), ==, (const void *)(b), "CHECK_PTR_EQ", #a,  \
               #b)

/* Two strings (NULL equals only NULL). */
#define CHECK_STR_EQ(a, b)                                                    \
    do {                                                                      \
        const char *a_ = (a), *b_ = (b);                                      \
        int ok_ = a_ == b_ ||                                                 \
                  (a_ != NULL && b_ != NULL && strcmp(a_, b_) == 0);          \
        if (!check_note_(ok_, __FILE__, __LINE__,                             \
                         "CHECK_STR_EQ(" #a ", " #b ")")) {                   \
            check_show_str_(#a, a_);                                          \
            check_show_str_(#b, b_);                                          \
        }                                                                     \
    } while (0)

/* The threads of this process named `name` (their comm), or -1 when
 * /proc/self/task cannot be read. A sanitizer's runtime starts threads of
 * its own at any time: count by name. */
static inline int
check_threads_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    size_t len = strlen(name);
    int n = 0;

    if (d == NULL)
        return -1;
    while ((e = readdir(d)) != NULL) {
        char path[300], comm[32] = "";
        FILE *f;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        f = fopen(path, "r");
        if (f == NULL)
            continue; /* the thread ended meanwhile */
        if (fgets(comm, sizeof(comm), f) != NULL &&
            strncmp(comm, name, len) == 0 && comm[len] == '\n')
            n++;
        fclose(f);
    }
    closedir(d);
    return n;
}

/* n bytes at a and at b; on failure the first differing offset and its
 * bytes. */
static inline void
check_mem_eq_(const void *a, const void *b, size_t n, const char *file,
              int line, const char *what)
{
    const unsigned char *x = a, *y = b;
    size_t i = 0;

    while (i < n && x[i] == y[i]) {
        i++;
    }
    if (!check_note_(i == n, file, line, what)) {
        fprintf(stderr,
                "    first difference at byte %zu of %zu: %#04x and %#04x\n",
                i, n, x[i], y[i]);
    }
}

#define CHECK_MEM_EQ(a, b, n)                                                 \
    check_mem_eq_((a), (b), (n), __FILE__, __LINE__,                          \
                  "CHECK_MEM_EQ(" #a ", " #b ", " #n ")")

/* A driver call expected to return `want` (a CUresult). */
#define CHECK_CU(want, call)                                                  \
    do {                                                                      \
        int got_ = (int)(call);                                               \
        if (!check_note_(got_ == (int)(want), __FILE__, __LINE__,             \
                         "CHECK_CU(" #want ", " #call ")")) {                 \
            fprintf(stderr, "    returned %d, expected %d\n", got_,           \
                    (int)(want));                                             \
        }                                                                     \
    } while (0)

#define CHECK_OK(call) CHECK_CU(0, call)

/* ---------------------------------------------------------------------------
 * The runner. */

/* Flags of a test. */
#define CHECK_BARE 1 /* run without the file's setup and teardown */

typedef struct check_test {
    const char *name;
    void (*fn)(void);
    int flags;
} check_test;

/* Runs t in this process; returns the exit status it earns. */
static inline int
check_run_here_(const check_test *t, void (*setup)(void),
                void (*teardown)(void))
{
    int hooks = !(t->flags & CHECK_BARE);

    check_passed = check_failed = 0;
    if (hooks && setup != NULL) {
        setup();
    }
    if (check_failed == 0) {
        t->fn();
        if (hooks && teardown != NULL) {
            teardown();
        }
    }
    else {
        fprintf(stderr, "%s: set-up failed, test not run\n", t->name);
    }
    printf("%s: %d passed, %d failed\n", t->name, check_passed, check_failed);
    fflush(NULL);
    return check_failed ? 1 : 0;
}

/* Runs t in a forked process; returns 0 when it passed. */
static inline int
check_run_forked_(const check_test *t, void (*setup)(void),
                  void (*teardown)(void))
{
    struct timespec t0, t1;
    int status = -1;
    pid_t pid;

    printf("== %s\n", t->name);
    fflush(NULL);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid = fork();
    if (pid == 0) {
        /* exit, not _exit: leak checkers report at exit. */
        exit(check_run_here_(t, setup, teardown));
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        printf("FAIL %s: cannot run it\n", t->name);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        printf("ok %s (%.0f ms)\n", t->name,
               (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
                   (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
        return 0;
    }
    if (WIFSIGNALED(status)) {
        printf("FAIL %s: killed by signal %d (%s)\n", t->name,
               WTERMSIG(status), strsignal(WTERMSIG(status)));
    }
    else {
        printf("FAIL %s: exit status %d\n", t->name, WEXITSTATUS(status));
    }
    return 1;
}

static inline const check_test *
check_find_(const check_test *tests, const check_test *end, const char *name)
{
    for (const check_test *t = tests; t < end && t->name != NULL; t++) {
        if (strcmp(t->name, name) == 0) {
            return t;
        }
    }
    fprintf(stderr, "no test named %s (--list lists them)\n", name);
    return NULL;
}

/* The list's length bounds its walks besides the sentinel, so that the
 * analyzer sees them stay inside it. */
static inline int
check_main_(int argc, char **argv, const check_test *tests, size_t ntests,
            void (*setup)(void), void (*teardown)(void))
{
    const check_test *t, *end = tests + ntests;
    int failed = 0, ran = 0;

    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (t = tests; t < end && t->name != NULL; t++) {
            printf("%s\n", t->name);
        }
        return 0;
    }
    if (argc == 2) {
        t = check_find_(tests, end, argv[1]);
        return t == NULL ? 2 : check_run_here_(t, setup, teardown);
    }
    for (int i = 1; i < argc; i++) {
        if (check_find_(tests, end, argv[i]) == NULL) {
            return 2;
        }
    }
    for (t = tests; t < end && t->name != NULL; t++) {
        int wanted = argc == 1;

        for (int i = 1; i < argc && !wanted; i++) {
            wanted = strcmp(argv[i], t->name) == 0;
        }
        if (wanted) {
            failed += check_run_forked_(t, setup, teardown);
            ran++;
        }
    }
    printf("%d tests, %d failed\n", ran, failed);
    return failed ? 1 : 0;
}

#define CHECK_MAIN(tests, setup, teardown)                                    \
    int main(int argc, char **argv)                                           \
    {                                                                         \
        return check_main_(argc, argv, tests,                                 \
                           sizeof(tests) / sizeof((tests)[0]), setup,         \
                           teardown);                                         \
    }

#endif
