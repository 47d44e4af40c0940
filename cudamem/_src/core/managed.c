/* managed.c: prefetch and advice for ranges of managed memory (managed.h):
 * the capability checks and the CUmemLocation forms of the calls. Does not
 * allocate, free or wait. */
#include "managed.h"

#include <string.h>

#include "device.h"
#include "driver.h"

/* The device behind `to` (or dev, for the host) must let the host and the
 * device use managed memory concurrently. */
static int
check_concurrent(cm_device *dev, cm_device *to, const char *what,
                 cm_error *err)
{
    cm_device *which = to != NULL ? to : dev;
    int supported;

    if (cm_device_attribute(which->ordinal,
                            CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
                            &supported, err) < 0) {
        return -1;
    }
    if (!supported) {
        return cm__fail_fmt(err, CM_ERR_SUPPORT,
                            "device %d does not support %s: "
                            "CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS is "
                            "0",
                            which->ordinal, what);
    }
    return 0;
}

static CUmemLocation
location(cm_device *to)
{
    CUmemLocation loc;

    memset(&loc, 0, sizeof(loc));
    if (to == NULL) {
        loc.type = CU_MEM_LOCATION_TYPE_HOST;
    }
    else {
        loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
        loc.id = (int)to->cudev;
    }
    return loc;
}

int
cm_managed_prefetch(cm_device *dev, CUdeviceptr ptr, size_t nbytes,
                    cm_device *to, CUstream stream, cm_error *err)
{
    CUmemLocation loc = location(to);
    cm_ctx_guard guard;

    if (cm_fork_check(err) < 0 || CM_REQUIRE(err, cuMemPrefetchAsync) < 0 ||
        check_concurrent(dev, to, "prefetching managed memory", err) < 0 ||
        cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    return cm_ctx_leave(
        &guard, CM_CALL(err, cuMemPrefetchAsync, ptr, nbytes, loc, 0u, stream),
        err);
}

int
cm_managed_advise(cm_device *dev, CUdeviceptr ptr, size_t nbytes,
                  CUmem_advise advice, cm_device *to, cm_error *err)
{
    CUmemLocation loc = location(to);
    cm_ctx_guard guard;

    if (cm_fork_check(err) < 0 || CM_REQUIRE(err, cuMemAdvise) < 0) {
        return -1;
    }
    if (advice != CU_MEM_ADVISE_SET_READ_MOSTLY &&
        advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY &&
        check_concurrent(dev, to, "managed memory location hints", err) < 0) {
        return -1;
    }
    if (cm_ctx_enter(dev, &guard, err) < 0) {
        return -1;
    }
    return cm_ctx_leave(
        &guard, CM_CALL(err, cuMemAdvise, ptr, nbytes, advice, loc), err);
}
