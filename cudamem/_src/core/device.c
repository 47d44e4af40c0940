/* device.c: device enumeration and identity (name, capability, memory, UUID,
 * PCI id). Every function checks the fork rule first; none needs a context. */
#include "device.h"

#include <stdio.h>

#include "driver.h"

int
cm_device_count(int *count, cm_error *err)
{
    if (cm_fork_check(err) < 0) {
        return -1;
    }
    return CM_CALL(err, cuDeviceGetCount, count);
}

int
cm_device_attribute(int ordinal, int attribute, int *value, cm_error *err)
{
    CUdevice dev;

    if (cm_fork_check(err) < 0 || CM_CALL(err, cuDeviceGet, &dev, ordinal)) {
        return -1;
    }
    return CM_CALL(err, cuDeviceGetAttribute, value,
                   (CUdevice_attribute)attribute, dev);
}

static void
format_uuid(const CUuuid *uuid, char *out, size_t size)
{
    const unsigned char *b = (const unsigned char *)uuid->bytes;

    snprintf(out, size,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
             "%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
             b[11], b[12], b[13], b[14], b[15]);
}

int
cm_device_info_get(int ordinal, cm_device_info *info, cm_error *err)
{
    CUdevice dev;
    CUuuid uuid;
    size_t total;

    if (cm_fork_check(err) < 0 || CM_CALL(err, cuDeviceGet, &dev, ordinal) ||
        CM_CALL(err, cuDeviceGetName, info->name, (int)sizeof(info->name),
                dev) ||
        CM_CALL(err, cuDeviceGetAttribute, &info->cc_major,
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) ||
        CM_CALL(err, cuDeviceGetAttribute, &info->cc_minor,
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) ||
        CM_CALL(err, cuDeviceTotalMem, &total, dev) ||
        CM_CALL(err, cuDeviceGetUuid, &uuid, dev) ||
        CM_CALL(err, cuDeviceGetPCIBusId, info->pci_bus_id,
                (int)sizeof(info->pci_bus_id), dev)) {
        return -1;
    }
    info->total_memory = total;
    format_uuid(&uuid, info->uuid, sizeof(info->uuid));
    return 0;
}
