/* cusim.h: the control API of the simulated driver (cusim_*), used by
 * cudamem.simulator through ctypes and by the C tests. The driver API itself
 * is cuda.h; nothing here is reachable through cuGetProcAddress. */
#ifndef CUSIM_H
#define CUSIM_H

#ifdef __cplusplus
extern "C" {
#endif

/* Live objects, counted over every device. */
typedef struct cusim_stats {
    unsigned long long device_allocations; /* cuMemAlloc */
    unsigned long long device_bytes;
    unsigned long long host_allocations; /* cuMemAllocHost, cuMemHostAlloc */
    unsigned long long host_bytes;
    unsigned long long registrations; /* cuMemHostRegister */
    unsigned long long registered_bytes;
    unsigned long long managed_allocations; /* cuMemAllocManaged */
    unsigned long long managed_bytes;
    unsigned long long streams; /* created by cuStreamCreate*, not destroyed */
    unsigned long long events;
    unsigned long long ipc_open; /* cuIpcOpenMemHandle mappings not closed */
    unsigned long long contexts; /* active contexts, primary ones included */
} cusim_stats;

/* Nonzero: this library is the simulator. */
int cusim_is_simulator(void);

/* Fault injection, per calling thread: the next `count` calls of `entry`
 * after `after` further successful ones return `code`. `entry` is a plain
 * driver name ("cuMemAlloc") and covers every versioned variant of it.
 * Returns 0, or -1 when the simulator has no such entry point. */
int cusim_inject(const char *entry, int code, unsigned after, unsigned count);
/* Forget every injected fault of the calling thread. */
void cusim_clear_faults(void);

void cusim_get_stats(cusim_stats *out);

/* Per entry point counters, over all threads since the last reset:
 * index in [0, cusim_entry_count()); returns the plain name, or NULL. */
int cusim_entry_count(void);
const char *cusim_entry_stats(int index, unsigned long long *calls,
                              unsigned long long *bytes);
void cusim_reset_counters(void);
/* A function every entry point calls on the calling thread, first (NULL:
 * none): cusim_entry_probed counts, per entry point since the last reset,
 * the calls for which it answered nonzero. With CPython's
 * PyGILState_Check, the calls made holding the GIL. */
void cusim_set_probe(int (*fn)(void));
unsigned long long cusim_entry_probed(int index);

/* Device memory size in bytes; only while nothing is allocated on it.
 * Returns 0, or a CUresult code. */
int cusim_set_memory(int device, unsigned long long nbytes);

/* Delay applied to every stream operation before it runs. */
void cusim_set_delay_us(unsigned us);
unsigned cusim_get_delay_us(void);

/* Stream-order hazard checker (also CUDAMEM_SIM_HAZARDS=1). Reports go to
 * stderr and are counted; the last one is kept. */
void cusim_set_hazards(int on);
unsigned long long cusim_hazard_count(void);
const char *cusim_last_hazard(void);

/* Strict pitches (also CUDAMEM_SIM_STRICT_PITCH=1): cuMemcpy2D and
 * cuMemcpy2DAsync between device memory refuse pitches that are not
 * multiples of CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, as cuda.h lets
 * the driver refuse pitches cuMemAllocPitch did not compute. */
void cusim_set_strict_pitch(int on);
int cusim_get_strict_pitch(void);

/* Forget faults (all threads), counters, hazard reports and the devices'
 * sticky errors (which a driver keeps until the process ends). */
void cusim_reset(void);

#ifdef __cplusplus
}
#endif
#endif
