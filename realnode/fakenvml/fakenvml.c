/*
 * libnvidia-ml.so.1 of the project's own: NVML for a machine without an NVIDIA GPU.
 *
 * It pretends N GPUs (default 2) so that NVIDIA's real device plugin and config-manager, and the
 * node agent through pynvml, run on the real kubelet node of the test bed. The GPUs come from the
 * file named by GPUSHARE_FAKE_NVML_CONFIG (key=value lines, `#` comments; read at the first init):
 *
 *   count=2                         number of GPUs (1..16)
 *   name=NVIDIA A100-SXM4-40GB      model of every GPU
 *   memory_mib=40960                memory of every GPU
 *   compute_capability=8.0          CUDA compute capability
 *   architecture=ampere             kepler|maxwell|pascal|volta|turing|ampere|ada|hopper|blackwell
 *   uuid_prefix=GPU-fa4e0000-0000-4000-8000-   the UUID of GPU i is this followed by i as 12 hex digits
 *   driver_version=550.54.15        cuda_driver_version=12040 (12.4)
 *   gpu.<i>.name=...  gpu.<i>.memory_mib=...  gpu.<i>.uuid=...   per-GPU overrides
 *
 * An unknown key or a bad value makes init fail (NVML_ERROR_UNKNOWN, the reason on stderr). The
 * functions implemented here are those the device plugin (nvml discovery, envvar device lists),
 * go-nvlib and pynvml's inventory call; every other function nvml.h declares is a generated
 * NOT_SUPPORTED stub (genstubs.py). MIG is off and MIG enumeration finds nothing
 * (NVML_ERROR_NOT_FOUND); an event-set wait sleeps its timeout and returns NVML_ERROR_TIMEOUT.
 * Built with nvml.h from the go-nvml module the plugin uses (hack/build-fake-nvml.sh); that header
 * wraps the handle pointers in one-member structs (nvmlDevice_t.handle), the same ABI as NVIDIA's.
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include "nvml.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_GPUS 16
#define CONFIG_ENV "GPUSHARE_FAKE_NVML_CONFIG"
#define TRACE_ENV "GPUSHARE_FAKE_NVML_TRACE"

struct nvmlDevice_st {
    unsigned int index;
    char uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned long long memory_mib;
};

struct nvmlEventSet_st {
    int unused;
};

static struct {
    unsigned int count;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned long long memory_mib;
    int cc_major, cc_minor;
    unsigned int arch;
    char uuid_prefix[48];
    char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    int cuda_driver_version;
    struct nvmlDevice_st gpus[MAX_GPUS];
} cfg;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;
static int loaded;

int gpushare_fake_nvml_stub(const char *name) {
    if (getenv(TRACE_ENV) != NULL)
        fprintf(stderr, "fake-nvml: %s: not supported\n", name);
    return NVML_ERROR_NOT_SUPPORTED;
}

static void trace(const char *name) {
    if (getenv(TRACE_ENV) != NULL)
        fprintf(stderr, "fake-nvml: %s\n", name);
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s))
        s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

static int parse_ull(const char *v, unsigned long long *out) {
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0')
        return -1;
    *out = n;
    return 0;
}

static int copy(char *dst, size_t size, const char *src) {
    if (strlen(src) >= size)
        return -1;
    strcpy(dst, src);
    return 0;
}

static const char *arch_names[] = {
    [NVML_DEVICE_ARCH_KEPLER] = "kepler", [NVML_DEVICE_ARCH_MAXWELL] = "maxwell",
    [NVML_DEVICE_ARCH_PASCAL] = "pascal", [NVML_DEVICE_ARCH_VOLTA] = "volta",
    [NVML_DEVICE_ARCH_TURING] = "turing", [NVML_DEVICE_ARCH_AMPERE] = "ampere",
    [NVML_DEVICE_ARCH_ADA] = "ada",       [NVML_DEVICE_ARCH_HOPPER] = "hopper",
    [NVML_DEVICE_ARCH_BLACKWELL] = "blackwell",
};

/* One key=value; 0 when understood. GPU overrides are kept aside until count is known. */
static int set_key(const char *key, const char *value, char over[MAX_GPUS][3][NVML_DEVICE_NAME_V2_BUFFER_SIZE]) {
    unsigned long long n;
    if (strcmp(key, "count") == 0) {
        if (parse_ull(value, &n) != 0 || n < 1 || n > MAX_GPUS)
            return -1;
        cfg.count = (unsigned int)n;
    } else if (strcmp(key, "name") == 0) {
        return copy(cfg.name, sizeof cfg.name, value);
    } else if (strcmp(key, "memory_mib") == 0) {
        return parse_ull(value, &cfg.memory_mib);
    } else if (strcmp(key, "compute_capability") == 0) {
        if (sscanf(value, "%d.%d", &cfg.cc_major, &cfg.cc_minor) != 2)
            return -1;
    } else if (strcmp(key, "architecture") == 0) {
        for (unsigned int a = 0; a < sizeof arch_names / sizeof arch_names[0]; a++) {
            if (arch_names[a] != NULL && strcmp(arch_names[a], value) == 0) {
                cfg.arch = a;
                return 0;
            }
        }
        return -1;
    } else if (strcmp(key, "uuid_prefix") == 0) {
        return copy(cfg.uuid_prefix, sizeof cfg.uuid_prefix, value);
    } else if (strcmp(key, "driver_version") == 0) {
        return copy(cfg.driver_version, sizeof cfg.driver_version, value);
    } else if (strcmp(key, "cuda_driver_version") == 0) {
        if (parse_ull(value, &n) != 0 || n > 1000000)
            return -1;
        cfg.cuda_driver_version = (int)n;
    } else if (strncmp(key, "gpu.", 4) == 0) {
        char *end;
        unsigned long i = strtoul(key + 4, &end, 10);
        if (end == key + 4 || *end != '.' || i >= MAX_GPUS)
            return -1;
        const char *field = end + 1;
        int f = strcmp(field, "name") == 0 ? 0 : strcmp(field, "memory_mib") == 0 ? 1 : strcmp(field, "uuid") == 0 ? 2 : -1;
        if (f < 0)
            return -1;
        if (f == 1 && parse_ull(value, &n) != 0)
            return -1;
        return copy(over[i][f], NVML_DEVICE_NAME_V2_BUFFER_SIZE, value);
    } else {
        return -1;
    }
    return 0;
}

static int load_config(void) {
    static char over[MAX_GPUS][3][NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    memset(&cfg, 0, sizeof cfg);
    memset(over, 0, sizeof over);
    cfg.count = 2;
    strcpy(cfg.name, "NVIDIA A100-SXM4-40GB");
    cfg.memory_mib = 40960;
    cfg.cc_major = 8;
    cfg.cc_minor = 0;
    cfg.arch = NVML_DEVICE_ARCH_AMPERE;
    strcpy(cfg.uuid_prefix, "GPU-fa4e0000-0000-4000-8000-");
    strcpy(cfg.driver_version, "550.54.15");
    cfg.cuda_driver_version = 12040;

    const char *path = getenv(CONFIG_ENV);
    if (path != NULL && *path != '\0') {
        FILE *f = fopen(path, "r");
        if (f == NULL) {
            fprintf(stderr, "fake-nvml: %s=%s: %s\n", CONFIG_ENV, path, strerror(errno));
            return -1;
        }
        char line[512];
        int lineno = 0;
        while (fgets(line, sizeof line, f) != NULL) {
            lineno++;
            char *s = trim(line);
            if (*s == '\0' || *s == '#')
                continue;
            char *eq = strchr(s, '=');
            if (eq == NULL) {
                fprintf(stderr, "fake-nvml: %s:%d: not key=value: %s\n", path, lineno, s);
                fclose(f);
                return -1;
            }
            *eq = '\0';
            char *key = trim(s), *value = trim(eq + 1);
            if (set_key(key, value, over) != 0) {
                fprintf(stderr, "fake-nvml: %s:%d: unknown key or bad value: %s=%s\n", path, lineno, key, value);
                fclose(f);
                return -1;
            }
        }
        fclose(f);
    }
    for (unsigned int i = 0; i < cfg.count; i++) {
        struct nvmlDevice_st *g = &cfg.gpus[i];
        g->index = i;
        strcpy(g->name, over[i][0][0] ? over[i][0] : cfg.name);
        g->memory_mib = cfg.memory_mib;
        if (over[i][1][0])
            parse_ull(over[i][1], &g->memory_mib);
        if (over[i][2][0])
            snprintf(g->uuid, sizeof g->uuid, "%s", over[i][2]);
        else
            snprintf(g->uuid, sizeof g->uuid, "%s%012x", cfg.uuid_prefix, i);
    }
    return 0;
}

static nvmlReturn_t init(const char *name) {
    trace(name);
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (!loaded) {
        if (load_config() == 0)
            loaded = 1;
        else
            ret = NVML_ERROR_UNKNOWN;
    }
    if (ret == NVML_SUCCESS)
        init_count++;
    pthread_mutex_unlock(&lock);
    return ret;
}

nvmlReturn_t nvmlInit(void) { return init("nvmlInit"); }
nvmlReturn_t nvmlInit_v2(void) { return init("nvmlInit_v2"); }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return init("nvmlInitWithFlags");
}

nvmlReturn_t nvmlShutdown(void) {
    trace("nvmlShutdown");
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (init_count == 0)
        ret = NVML_ERROR_UNINITIALIZED;
    else
        init_count--;
    pthread_mutex_unlock(&lock);
    return ret;
}

static int ready(void) {
    pthread_mutex_lock(&lock);
    int ok = init_count > 0;
    pthread_mutex_unlock(&lock);
    return ok;
}

#define REQUIRE_INIT()                    \
    do {                                  \
        if (!ready())                     \
            return NVML_ERROR_UNINITIALIZED; \
    } while (0)

static struct nvmlDevice_st *gpu(nvmlDevice_t device) {
    struct nvmlDevice_st *g = device.handle;
    return g != NULL && g >= &cfg.gpus[0] && g < &cfg.gpus[cfg.count] ? g : NULL;
}

static nvmlDevice_t handle(unsigned int index) {
    nvmlDevice_t d = {.handle = &cfg.gpus[index]};
    return d;
}

static nvmlReturn_t valid(nvmlDevice_t device) {
    if (!ready())
        return NVML_ERROR_UNINITIALIZED;
    return gpu(device) != NULL ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

#define REQUIRE_DEVICE(d, out)                   \
    do {                                         \
        nvmlReturn_t r_ = valid(d);              \
        if (r_ != NVML_SUCCESS)                  \
            return r_;                           \
        if ((out) == NULL)                       \
            return NVML_ERROR_INVALID_ARGUMENT;  \
    } while (0)

static nvmlReturn_t put_string(char *dst, unsigned int length, const char *src) {
    if (dst == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

/* ---- system ---- */

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    trace("nvmlSystemGetDriverVersion");
    REQUIRE_INIT();
    return put_string(version, length, cfg.driver_version);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    trace("nvmlSystemGetNVMLVersion");
    REQUIRE_INIT();
    char v[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE + 8];
    snprintf(v, sizeof v, "12.%s", cfg.driver_version);
    return put_string(version, length, v);
}

static nvmlReturn_t cuda_version(int *v) {
    REQUIRE_INIT();
    if (v == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *v = cfg.cuda_driver_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    trace("nvmlSystemGetCudaDriverVersion");
    return cuda_version(v);
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
    trace("nvmlSystemGetCudaDriverVersion_v2");
    return cuda_version(v);
}

/* ---- device enumeration ---- */

static nvmlReturn_t count(unsigned int *n) {
    REQUIRE_INIT();
    if (n == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *n = cfg.count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) {
    trace("nvmlDeviceGetCount");
    return count(n);
}
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
    trace("nvmlDeviceGetCount_v2");
    return count(n);
}

static nvmlReturn_t by_index(unsigned int index, nvmlDevice_t *device) {
    REQUIRE_INIT();
    if (device == NULL || index >= cfg.count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = handle(index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    trace("nvmlDeviceGetHandleByIndex");
    return by_index(index, device);
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    trace("nvmlDeviceGetHandleByIndex_v2");
    return by_index(index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    trace("nvmlDeviceGetHandleByUUID");
    REQUIRE_INIT();
    if (uuid == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < cfg.count; i++) {
        if (strcmp(cfg.gpus[i].uuid, uuid) == 0) {
            *device = handle(i);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

static void bus_id(unsigned int index, char *out, size_t size, int legacy) {
    /* Bus 0x10 + index: distinct, plausible, and absent from this host's /sys/bus/pci. */
    snprintf(out, size, legacy ? "%04X:%02X:%02X.0" : "%08X:%02X:%02X.0", 0, 0x10 + index, 0);
}

static nvmlReturn_t by_bus_id(const char *id, nvmlDevice_t *device) {
    REQUIRE_INIT();
    if (id == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < cfg.count; i++) {
        char full[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE], legacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
        bus_id(i, full, sizeof full, 0);
        bus_id(i, legacy, sizeof legacy, 1);
        if (strcasecmp(id, full) == 0 || strcasecmp(id, legacy) == 0) {
            *device = handle(i);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *id, nvmlDevice_t *device) {
    trace("nvmlDeviceGetHandleByPciBusId");
    return by_bus_id(id, device);
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *id, nvmlDevice_t *device) {
    trace("nvmlDeviceGetHandleByPciBusId_v2");
    return by_bus_id(id, device);
}

/* ---- device attributes ---- */

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    trace("nvmlDeviceGetIndex");
    REQUIRE_DEVICE(device, index);
    *index = gpu(device)->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    trace("nvmlDeviceGetUUID");
    REQUIRE_DEVICE(device, uuid);
    return put_string(uuid, length, gpu(device)->uuid);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    trace("nvmlDeviceGetName");
    REQUIRE_DEVICE(device, name);
    return put_string(name, length, gpu(device)->name);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor) {
    trace("nvmlDeviceGetMinorNumber");
    REQUIRE_DEVICE(device, minor);
    *minor = gpu(device)->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    trace("nvmlDeviceGetMemoryInfo");
    REQUIRE_DEVICE(device, memory);
    memory->total = gpu(device)->memory_mib * 1024ULL * 1024ULL;
    memory->used = 0;
    memory->free = memory->total;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    trace("nvmlDeviceGetMemoryInfo_v2");
    REQUIRE_DEVICE(device, memory);
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = gpu(device)->memory_mib * 1024ULL * 1024ULL;
    memory->reserved = 0;
    memory->used = 0;
    memory->free = memory->total;
    return NVML_SUCCESS;
}

/* nvmlPciInfo_t as of the _v3 call; the unversioned (v1) call's struct is a shorter prefix of it
 * (busId[16] and the five ids), so only that prefix is written for it. */
static void pci_info(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof *pci);
    bus_id(gpu(device)->index, pci->busIdLegacy, sizeof pci->busIdLegacy, 1);
    bus_id(gpu(device)->index, pci->busId, sizeof pci->busId, 0);
    pci->domain = 0;
    pci->bus = 0x10 + gpu(device)->index;
    pci->device = 0;
    pci->pciDeviceId = 0x20B010DE; /* A100-SXM4-40GB, vendor NVIDIA */
    pci->pciSubSystemId = 0x134F10DE;
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    trace("nvmlDeviceGetPciInfo");
    REQUIRE_DEVICE(device, pci);
    nvmlPciInfo_t full;
    pci_info(device, &full);
    memcpy(pci, &full, offsetof(nvmlPciInfo_t, busId));
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    trace("nvmlDeviceGetPciInfo_v2");
    REQUIRE_DEVICE(device, pci);
    pci_info(device, pci);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    trace("nvmlDeviceGetPciInfo_v3");
    REQUIRE_DEVICE(device, pci);
    pci_info(device, pci);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    trace("nvmlDeviceGetCudaComputeCapability");
    REQUIRE_DEVICE(device, major);
    if (minor == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = cfg.cc_major;
    *minor = cfg.cc_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch) {
    trace("nvmlDeviceGetArchitecture");
    REQUIRE_DEVICE(device, arch);
    *arch = cfg.arch;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *brand) {
    trace("nvmlDeviceGetBrand");
    REQUIRE_DEVICE(device, brand);
    *brand = NVML_BRAND_NVIDIA;
    return NVML_SUCCESS;
}

/* ---- MIG: capable, disabled, nothing to enumerate ---- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    trace("nvmlDeviceGetMigMode");
    REQUIRE_DEVICE(device, current);
    if (pending == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *current = NVML_DEVICE_MIG_DISABLE;
    *pending = NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMig) {
    trace("nvmlDeviceIsMigDeviceHandle");
    REQUIRE_DEVICE(device, isMig);
    *isMig = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *n) {
    trace("nvmlDeviceGetMaxMigDeviceCount");
    REQUIRE_DEVICE(device, n);
    *n = cfg.arch >= NVML_DEVICE_ARCH_AMPERE ? 7 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *mig) {
    trace("nvmlDeviceGetMigDeviceHandleByIndex");
    (void)index;
    REQUIRE_DEVICE(device, mig);
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gi) {
    trace("nvmlDeviceGetGpuInstanceById");
    (void)id;
    REQUIRE_DEVICE(device, gi);
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *device) {
    trace("nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
    (void)mig;
    (void)device;
    return NVML_ERROR_INVALID_ARGUMENT; /* no handle here is a MIG device's */
}

/* ---- events: nothing ever happens; a wait sleeps its timeout ---- */

static struct nvmlEventSet_st the_event_set;

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    trace("nvmlEventSetCreate");
    REQUIRE_INIT();
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    set->handle = &the_event_set;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    trace("nvmlEventSetFree");
    (void)set;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types) {
    trace("nvmlDeviceGetSupportedEventTypes");
    REQUIRE_DEVICE(device, types);
    *types = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError | nvmlEventTypeSingleBitEccError;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
    trace("nvmlDeviceRegisterEvents");
    (void)types;
    nvmlReturn_t r = valid(device);
    if (r != NVML_SUCCESS)
        return r;
    return set.handle == NULL ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS;
}

static nvmlReturn_t wait_events(nvmlEventSet_t set, unsigned int timeout_ms) {
    REQUIRE_INIT();
    if (set.handle == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec ts = {.tv_sec = timeout_ms / 1000, .tv_nsec = (long)(timeout_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) {
    trace("nvmlEventSetWait");
    (void)data;
    return wait_events(set, timeout_ms);
}
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms) {
    trace("nvmlEventSetWait_v2");
    (void)data;
    return wait_events(set, timeout_ms);
}
