/* history.c: the hook of the memory history (history.h). */
#include "history.h"

cm_history_hook cm__history_hook;

void
cm_history_set_hook(cm_history_hook hook)
{
    __atomic_store_n(&cm__history_hook, hook, __ATOMIC_RELEASE);
}
