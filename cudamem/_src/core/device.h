/* device.h: device enumeration and identity, read straight from the driver.
 * Does not own contexts (a device needs none to be described). */
#ifndef CM_DEVICE_H
#define CM_DEVICE_H

#include "status.h"

typedef struct cm_device_info {
    char name[256];
    int cc_major, cc_minor;
    unsigned long long total_memory;
    char uuid[48];       /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    char pci_bus_id[32]; /* "0000:65:00.0" */
} cm_device_info;

int cm_device_count(int *count, cm_error *err);
int cm_device_info_get(int ordinal, cm_device_info *info, cm_error *err);
/* One CU_DEVICE_ATTRIBUTE_* value. */
int cm_device_attribute(int ordinal, int attribute, int *value, cm_error *err);

#endif
