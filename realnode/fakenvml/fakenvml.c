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
 * (NVML_ERROR_NOT_FOUND) unless GPUSHARE_FAKE_NVML_MIG_STATE names a state file: then MIG is
 * NVML's, for the A100 40GB (the MIG section says how far); an event-set wait sleeps its timeout
 * and returns NVML_ERROR_TIMEOUT.
 * Built with nvml.h from the go-nvml module the plugin uses (hack/build-fake-nvml.sh); that header
 * wraps the handle pointers in one-member structs (nvmlDevice_t.handle), the same ABI as NVIDIA's.
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include "nvml.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

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

/* MIG handles (see the MIG section): addresses in these tables, by GPU, GPU instance id and
 * compute instance id; a MIG device's handle is an nvmlDevice_t into mig_devices. */
#define MAX_GI 8 /* GPU instance ids 1..7 */
#define MAX_CI 8 /* compute instance ids 0..7 in a GPU instance */

struct nvmlGpuInstance_st {
    int unused;
};

struct nvmlComputeInstance_st {
    int unused;
};

static struct nvmlGpuInstance_st gi_handles[MAX_GPUS][MAX_GI];
static struct nvmlComputeInstance_st ci_handles[MAX_GPUS][MAX_GI][MAX_CI];
static struct nvmlDevice_st mig_devices[MAX_GPUS][MAX_GI][MAX_CI];

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

static int is_mig_handle(nvmlDevice_t device) {
    struct nvmlDevice_st *d = device.handle, *base = &mig_devices[0][0][0];
    return d != NULL && d >= base && d < base + MAX_GPUS * MAX_GI * MAX_CI &&
           (size_t)(d - base) / (MAX_GI * MAX_CI) < cfg.count;
}

/* The GPU a handle names; for a MIG device's handle, its parent GPU. */
static struct nvmlDevice_st *gpu(nvmlDevice_t device) {
    struct nvmlDevice_st *g = device.handle;
    if (g != NULL && g >= &cfg.gpus[0] && g < &cfg.gpus[cfg.count])
        return g;
    return is_mig_handle(device) ? &cfg.gpus[(size_t)(g - &mig_devices[0][0][0]) / (MAX_GI * MAX_CI)] : NULL;
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

/* Defined in the MIG section. */
static nvmlReturn_t mig_string(nvmlDevice_t device, int what, char *out, unsigned int length);
static nvmlReturn_t mig_memory_mib(nvmlDevice_t device, unsigned long long *mib);
static nvmlReturn_t mig_by_uuid(const char *uuid, nvmlDevice_t *out, int *found);

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
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
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
    int found;
    nvmlReturn_t ret = mig_by_uuid(uuid, device, &found);
    if (ret != NVML_SUCCESS || found)
        return ret;
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
    if (is_mig_handle(device))
        return mig_string(device, 0, uuid, length);
    return put_string(uuid, length, gpu(device)->uuid);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    trace("nvmlDeviceGetName");
    REQUIRE_DEVICE(device, name);
    if (is_mig_handle(device))
        return mig_string(device, 1, name, length);
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
    unsigned long long mib = gpu(device)->memory_mib;
    nvmlReturn_t ret = is_mig_handle(device) ? mig_memory_mib(device, &mib) : NVML_SUCCESS;
    if (ret != NVML_SUCCESS)
        return ret;
    memory->total = mib * 1024ULL * 1024ULL;
    memory->used = 0;
    memory->free = memory->total;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    trace("nvmlDeviceGetMemoryInfo_v2");
    REQUIRE_DEVICE(device, memory);
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long mib = gpu(device)->memory_mib;
    nvmlReturn_t ret = is_mig_handle(device) ? mig_memory_mib(device, &mib) : NVML_SUCCESS;
    if (ret != NVML_SUCCESS)
        return ret;
    memory->total = mib * 1024ULL * 1024ULL;
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

/* ---- MIG ----
 *
 * MIG lives in the state file named by GPUSHARE_FAKE_NVML_MIG_STATE, so that separate processes
 * (mig-parted, the device plugin, GFD, pynvml) agree. Every MIG call reads the whole file under
 * flock(2): shared to read; exclusive to change, the file rewritten while the lock is held.
 * Without the variable MIG is as it always was here: capable, disabled, nothing to enumerate, and
 * every MIG change NOT_SUPPORTED. A missing file is an empty state (MIG disabled everywhere); the
 * first change creates it (its folder must exist). Lines of the file:
 *
 *   mig <gpu> <0|1>                                  MIG mode of a GPU (absent: disabled)
 *   gi <gpu> <id> <profile> <start>                  a GPU instance and its placement
 *   ci <gpu> <gi id> <id> <profile> <start>          a compute instance in it
 *
 * The model, and where it is simpler than the hardware:
 * - Profiles for the A100 40GB (7 compute slices, 8 memory slices; NVIDIA's MIG user guide, the
 *   same numbers as go-nvml's dgxa100 mock). Another GPU model has no profiles: its MIG mode
 *   cannot be enabled (NOT_SUPPORTED). Profile ids are NVML's NVML_*_INSTANCE_PROFILE_* values.
 * - A mode change takes effect at once (current == pending), as it does after the GPU reset that
 *   mig-parted would run; refused while GPU instances exist (NVML_ERROR_IN_USE). Running
 *   processes are not modelled (no process ever runs on these GPUs).
 * - A GPU instance takes a placement of its profile (memory slices) that no other instance
 *   overlaps, and its compute slices; more than the profile's instance count, or no free slot, is
 *   NVML_ERROR_INSUFFICIENT_RESOURCES. Without a placement the first free one is taken.
 * - A GPU instance with compute instances cannot be destroyed (NVML_ERROR_IN_USE), as on the
 *   hardware; a compute instance can always be destroyed (processes are not modelled).
 * - MIG devices (one per compute instance) enumerate in order of GPU instance id, then compute
 *   instance id; their UUIDs (MIG-...) follow from the GPU's UUID and the two ids.
 * - Only the shared engine profile exists for compute instances, as on the A100.
 */

#define MIG_STATE_ENV "GPUSHARE_FAKE_NVML_MIG_STATE"
#define MEMORY_SLICES 8
#define COMPUTE_SLICES 7
#define SMS_PER_SLICE 14

struct gi_profile {
    unsigned int id;      /* NVML_GPU_INSTANCE_PROFILE_* */
    const char *name;     /* as nvidia-smi names it */
    unsigned int slices;  /* compute slices */
    unsigned int count;   /* instances one GPU can hold */
    unsigned int size;    /* memory slices of a placement */
    unsigned int starts;  /* bit i: a placement may start at memory slice i */
    unsigned int decoders, media; /* decoders; JPEG and OFA engines (the +me profiles, the whole GPU) */
    unsigned long long memory_mb;
};

static const struct gi_profile a100_40gb[] = {
    {NVML_GPU_INSTANCE_PROFILE_1_SLICE, "1g.5gb", 1, 7, 1, 0x7f, 0, 0, 4864},
    {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, "1g.5gb+me", 1, 1, 1, 0x7f, 1, 1, 4864},
    {NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, "1g.10gb", 1, 4, 2, 0x55, 1, 0, 9856},
    {NVML_GPU_INSTANCE_PROFILE_2_SLICE, "2g.10gb", 2, 3, 2, 0x15, 1, 0, 9856},
    {NVML_GPU_INSTANCE_PROFILE_3_SLICE, "3g.20gb", 3, 2, 4, 0x11, 2, 0, 19968},
    {NVML_GPU_INSTANCE_PROFILE_4_SLICE, "4g.20gb", 4, 1, 4, 0x01, 2, 0, 19968},
    {NVML_GPU_INSTANCE_PROFILE_7_SLICE, "7g.40gb", 7, 1, 8, 0x01, 5, 1, 40192},
};

/* Compute slices of each compute-instance profile (0: none such). */
static const unsigned int ci_slices[NVML_COMPUTE_INSTANCE_PROFILE_COUNT] = {
    [NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE] = 1, [NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE] = 2,
    [NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE] = 3, [NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE] = 4,
    [NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE] = 7,
};

struct mig_ci {
    int used;
    unsigned int profile, start;
};

struct mig_gi {
    int used;
    unsigned int profile, start;
    struct mig_ci ci[MAX_CI];
};

/* The state as last read from the file; only valid under mig_lock, after mig_begin. */
static struct {
    unsigned int mode[MAX_GPUS];
    struct mig_gi gi[MAX_GPUS][MAX_GI]; /* by GPU instance id (1..MAX_GI-1) */
} mig;

static pthread_mutex_t mig_lock = PTHREAD_MUTEX_INITIALIZER;
static int mig_fd = -1; /* the state file, locked exclusively between mig_begin(1) and mig_end */

static const struct gi_profile *gi_profile(unsigned int g, unsigned int profile) {
    if (strstr(cfg.gpus[g].name, "A100") == NULL || strstr(cfg.gpus[g].name, "40GB") == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof a100_40gb / sizeof a100_40gb[0]; i++) {
        if (a100_40gb[i].id == profile)
            return &a100_40gb[i];
    }
    return NULL;
}

static int mig_capable(unsigned int g) { return gi_profile(g, NVML_GPU_INSTANCE_PROFILE_1_SLICE) != NULL; }

/* Compute instances of `profile` that a GPU instance of `gp` holds; 0 when it has no such profile. */
static unsigned int ci_count(const struct gi_profile *gp, unsigned int profile) {
    unsigned int c = profile < NVML_COMPUTE_INSTANCE_PROFILE_COUNT ? ci_slices[profile] : 0;
    if (c == 0 || c > gp->slices || (gp->slices == 4 && c == 3))
        return 0;
    return gp->slices / c;
}

static int parse_state(FILE *f, const char *path) {
    char line[128];
    int lineno = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        lineno++;
        char *s = trim(line);
        unsigned int g, id, ci, profile, start, mode;
        int ok = 0;
        if (*s == '\0' || *s == '#') {
            ok = 1;
        } else if (sscanf(s, "mig %u %u", &g, &mode) == 2) {
            ok = g < MAX_GPUS && mode <= 1;
            if (ok)
                mig.mode[g] = mode;
        } else if (sscanf(s, "gi %u %u %u %u", &g, &id, &profile, &start) == 4) {
            ok = g < MAX_GPUS && id > 0 && id < MAX_GI && start < MEMORY_SLICES;
            if (ok)
                mig.gi[g][id] = (struct mig_gi){.used = 1, .profile = profile, .start = start};
        } else if (sscanf(s, "ci %u %u %u %u %u", &g, &id, &ci, &profile, &start) == 5) {
            ok = g < MAX_GPUS && id > 0 && id < MAX_GI && mig.gi[g][id].used && ci < MAX_CI;
            if (ok)
                mig.gi[g][id].ci[ci] = (struct mig_ci){.used = 1, .profile = profile, .start = start};
        }
        if (!ok) {
            fprintf(stderr, "fake-nvml: %s:%d: bad MIG state line: %s\n", path, lineno, s);
            return -1;
        }
    }
    return 0;
}

/* Reads the state under the file's lock (exclusive, and kept until mig_end, when `write`). The
 * caller holds mig_lock. NOT_SUPPORTED when no state file is configured: MIG disabled. */
static nvmlReturn_t mig_begin(int write) {
    memset(&mig, 0, sizeof mig);
    const char *path = getenv(MIG_STATE_ENV);
    if (path == NULL || *path == '\0')
        return NVML_ERROR_NOT_SUPPORTED;
    int fd = open(path, write ? O_RDWR | O_CREAT | O_CLOEXEC : O_RDONLY | O_CLOEXEC, 0644);
    if (fd < 0 && !write && errno == ENOENT)
        return NVML_SUCCESS;
    if (fd < 0 || flock(fd, write ? LOCK_EX : LOCK_SH) != 0) {
        fprintf(stderr, "fake-nvml: %s=%s: %s\n", MIG_STATE_ENV, path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NVML_ERROR_UNKNOWN;
    }
    int dupfd = dup(fd);
    FILE *f = dupfd < 0 ? NULL : fdopen(dupfd, "r");
    int bad = f == NULL || parse_state(f, path) != 0;
    if (f != NULL)
        fclose(f);
    if (bad || !write) {
        close(fd);
        return bad ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
    }
    mig_fd = fd;
    return NVML_SUCCESS;
}

/* Ends a change: writes the state back when `save`, then drops the lock. */
static nvmlReturn_t mig_end(int save) {
    nvmlReturn_t ret = NVML_SUCCESS;
    if (save) {
        int bad = ftruncate(mig_fd, 0) != 0 || lseek(mig_fd, 0, SEEK_SET) != 0;
        dprintf(mig_fd, "# MIG state of the project's libnvidia-ml.so.1 (realnode/fakenvml/fakenvml.c)\n");
        for (unsigned int g = 0; g < cfg.count; g++) {
            dprintf(mig_fd, "mig %u %u\n", g, mig.mode[g]);
            for (unsigned int id = 1; id < MAX_GI; id++) {
                struct mig_gi *gi = &mig.gi[g][id];
                if (!gi->used)
                    continue;
                dprintf(mig_fd, "gi %u %u %u %u\n", g, id, gi->profile, gi->start);
                for (unsigned int c = 0; c < MAX_CI; c++) {
                    if (gi->ci[c].used)
                        dprintf(mig_fd, "ci %u %u %u %u %u\n", g, id, c, gi->ci[c].profile, gi->ci[c].start);
                }
            }
        }
        /* No fsync: the processes that share the file read it through the page cache. */
        if (bad) {
            fprintf(stderr, "fake-nvml: writing the MIG state: %s\n", strerror(errno));
            ret = NVML_ERROR_UNKNOWN;
        }
    }
    close(mig_fd);
    mig_fd = -1;
    return ret;
}

/* ---- handles: stable addresses in tables, whatever the state; the state says which are live ---- */

static nvmlGpuInstance_t gi_handle(unsigned int g, unsigned int id) {
    nvmlGpuInstance_t h = {.handle = &gi_handles[g][id]};
    return h;
}

static nvmlComputeInstance_t ci_handle(unsigned int g, unsigned int id, unsigned int ci) {
    nvmlComputeInstance_t h = {.handle = &ci_handles[g][id][ci]};
    return h;
}

static nvmlDevice_t mig_handle(unsigned int g, unsigned int id, unsigned int ci) {
    nvmlDevice_t h = {.handle = &mig_devices[g][id][ci]};
    return h;
}

/* The live GPU instance a handle names (state loaded), or NULL. */
static struct mig_gi *gi_of(nvmlGpuInstance_t h, unsigned int *g, unsigned int *id) {
    struct nvmlGpuInstance_st *base = &gi_handles[0][0];
    if (h.handle == NULL || h.handle < base || h.handle >= base + MAX_GPUS * MAX_GI)
        return NULL;
    size_t k = (size_t)(h.handle - base);
    *g = (unsigned int)(k / MAX_GI);
    *id = (unsigned int)(k % MAX_GI);
    return *g < cfg.count && mig.gi[*g][*id].used ? &mig.gi[*g][*id] : NULL;
}

static struct mig_ci *ci_of(nvmlComputeInstance_t h, unsigned int *g, unsigned int *id, unsigned int *ci) {
    struct nvmlComputeInstance_st *base = &ci_handles[0][0][0];
    if (h.handle == NULL || h.handle < base || h.handle >= base + MAX_GPUS * MAX_GI * MAX_CI)
        return NULL;
    size_t k = (size_t)(h.handle - base);
    *g = (unsigned int)(k / (MAX_GI * MAX_CI));
    *id = (unsigned int)(k / MAX_CI % MAX_GI);
    *ci = (unsigned int)(k % MAX_CI);
    if (*g >= cfg.count || !mig.gi[*g][*id].used || !mig.gi[*g][*id].ci[*ci].used)
        return NULL;
    return &mig.gi[*g][*id].ci[*ci];
}

static void mig_uuid(unsigned int g, unsigned int id, unsigned int ci, char *out, size_t size) {
    unsigned int h = 2166136261u; /* FNV-1a of the GPU's UUID */
    for (const char *p = cfg.gpus[g].uuid; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    snprintf(out, size, "MIG-%08x-%04x-4%03x-8%03x-%012x", h, g, id, ci, 0x6d6967u);
}

/* What a MIG device handle names, read from the state. */
struct mig_view {
    unsigned int gpu, gi, ci, ci_slices;
    const struct gi_profile *profile;
    char uuid[NVML_DEVICE_UUID_BUFFER_SIZE];
};

static nvmlReturn_t mig_view(nvmlDevice_t device, struct mig_view *v) {
    if (!is_mig_handle(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t k = (size_t)((struct nvmlDevice_st *)device.handle - &mig_devices[0][0][0]);
    v->gpu = (unsigned int)(k / (MAX_GI * MAX_CI));
    v->gi = (unsigned int)(k / MAX_CI % MAX_GI);
    v->ci = (unsigned int)(k % MAX_CI);
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(0);
    if (ret == NVML_SUCCESS) {
        struct mig_gi *gi = &mig.gi[v->gpu][v->gi];
        if (v->gpu >= cfg.count || !gi->used || !gi->ci[v->ci].used) {
            ret = NVML_ERROR_INVALID_ARGUMENT; /* the instance is gone: a stale handle */
        } else {
            v->profile = gi_profile(v->gpu, gi->profile);
            v->ci_slices = ci_slices[gi->ci[v->ci].profile];
            mig_uuid(v->gpu, v->gi, v->ci, v->uuid, sizeof v->uuid);
            if (v->profile == NULL)
                ret = NVML_ERROR_UNKNOWN;
        }
    }
    pthread_mutex_unlock(&mig_lock);
    return ret == NVML_ERROR_NOT_SUPPORTED ? NVML_ERROR_INVALID_ARGUMENT : ret;
}

static void mig_name(const struct mig_view *v, char *out, size_t size) {
    if (v->ci_slices == v->profile->slices)
        snprintf(out, size, "%s MIG %s", cfg.gpus[v->gpu].name, v->profile->name);
    else
        snprintf(out, size, "%s MIG %uc.%s", cfg.gpus[v->gpu].name, v->ci_slices, v->profile->name);
}

/* ---- MIG mode ---- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    trace("nvmlDeviceGetMigMode");
    REQUIRE_DEVICE(device, current);
    if (pending == NULL || is_mig_handle(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(0);
    *current = *pending = ret == NVML_SUCCESS ? mig.mode[gpu(device)->index] : NVML_DEVICE_MIG_DISABLE;
    pthread_mutex_unlock(&mig_lock);
    return ret == NVML_ERROR_NOT_SUPPORTED ? NVML_SUCCESS : ret;
}

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus) {
    trace("nvmlDeviceSetMigMode");
    REQUIRE_DEVICE(device, activationStatus);
    unsigned int g = gpu(device)->index;
    if (is_mig_handle(device) || mode > NVML_DEVICE_MIG_ENABLE)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_capable(g))
        return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(1);
    if (ret == NVML_SUCCESS) {
        int busy = 0;
        for (unsigned int id = 1; id < MAX_GI; id++)
            busy |= mig.gi[g][id].used;
        if (mig.mode[g] != mode && busy)
            ret = NVML_ERROR_IN_USE;
        else
            mig.mode[g] = mode;
        nvmlReturn_t saved = mig_end(ret == NVML_SUCCESS);
        ret = ret == NVML_SUCCESS ? saved : ret;
    }
    pthread_mutex_unlock(&mig_lock);
    *activationStatus = ret;
    return ret;
}

/* ---- GPU instances ---- */

static unsigned int slots(unsigned int size, unsigned int start) { return ((1u << size) - 1) << start; }

/* Memory slices taken on GPU g, and compute slices in *compute. */
static unsigned int gi_taken(unsigned int g, unsigned int *compute) {
    unsigned int mask = 0;
    *compute = 0;
    for (unsigned int id = 1; id < MAX_GI; id++) {
        const struct mig_gi *gi = &mig.gi[g][id];
        const struct gi_profile *p = gi->used ? gi_profile(g, gi->profile) : NULL;
        if (p != NULL) {
            mask |= slots(p->size, gi->start);
            *compute += p->slices;
        }
    }
    return mask;
}

static unsigned int gi_instances(unsigned int g, unsigned int profile) {
    unsigned int n = 0;
    for (unsigned int id = 1; id < MAX_GI; id++)
        n += mig.gi[g][id].used && mig.gi[g][id].profile == profile;
    return n;
}

/* First free placement of p (at `start` only, when >= 0) beside the taken slices; -1 when none. */
static int gi_fit(const struct gi_profile *p, unsigned int taken, unsigned int compute, int start) {
    if (compute + p->slices > COMPUTE_SLICES)
        return -1;
    for (int s = 0; s < MEMORY_SLICES; s++) {
        if ((start < 0 || s == start) && (p->starts >> s & 1) && !(taken & slots(p->size, (unsigned int)s)))
            return s;
    }
    return -1;
}

/* The GPU and profile of a call on GPU instances; the state is loaded. */
static nvmlReturn_t gi_call(nvmlDevice_t device, unsigned int profile, unsigned int *g, const struct gi_profile **p) {
    nvmlReturn_t r = valid(device);
    if (r != NVML_SUCCESS)
        return r;
    if (is_mig_handle(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    *g = gpu(device)->index;
    if (!mig.mode[*g])
        return NVML_ERROR_NOT_SUPPORTED;
    if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    *p = gi_profile(*g, profile);
    return *p != NULL ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

static void gi_profile_info(const struct gi_profile *p, nvmlGpuInstanceProfileInfo_t *info) {
    memset(info, 0, sizeof *info);
    info->id = p->id;
    info->sliceCount = p->slices;
    info->instanceCount = p->count;
    info->multiprocessorCount = p->slices * SMS_PER_SLICE;
    info->copyEngineCount = p->slices;
    info->decoderCount = p->decoders;
    info->jpegCount = p->media;
    info->ofaCount = p->media;
    info->memorySizeMB = p->memory_mb;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_t *info) {
    trace("nvmlDeviceGetGpuInstanceProfileInfo");
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int g;
    const struct gi_profile *p;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(0);
    if (ret == NVML_SUCCESS)
        ret = gi_call(device, profile, &g, &p);
    if (ret == NVML_SUCCESS)
        gi_profile_info(p, info);
    pthread_mutex_unlock(&mig_lock);
    return ret;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t *info) {
    trace("nvmlDeviceGetGpuInstanceProfileInfoV");
    if (info == NULL || info->version != nvmlGpuInstanceProfileInfo_v2)
        return info == NULL ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlGpuInstanceProfileInfo_t v1;
    nvmlReturn_t ret = nvmlDeviceGetGpuInstanceProfileInfo(device, profile, &v1);
    if (ret != NVML_SUCCESS)
        return ret;
    info->id = v1.id;
    info->isP2pSupported = v1.isP2pSupported;
    info->sliceCount = v1.sliceCount;
    info->instanceCount = v1.instanceCount;
    info->multiprocessorCount = v1.multiprocessorCount;
    info->copyEngineCount = v1.copyEngineCount;
    info->decoderCount = v1.decoderCount;
    info->encoderCount = v1.encoderCount;
    info->jpegCount = v1.jpegCount;
    info->ofaCount = v1.ofaCount;
    info->memorySizeMB = v1.memorySizeMB;
    snprintf(info->name, sizeof info->name, "MIG %s", gi_profile(gpu(device)->index, profile)->name);
    return NVML_SUCCESS;
}

static nvmlReturn_t placements(nvmlDevice_t device, unsigned int profile, nvmlGpuInstancePlacement_t *out, unsigned int *count) {
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int g;
    const struct gi_profile *p;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(0);
    if (ret == NVML_SUCCESS)
        ret = gi_call(device, profile, &g, &p);
    if (ret == NVML_SUCCESS) {
        unsigned int n = 0;
        for (unsigned int s = 0; s < MEMORY_SLICES; s++) {
            if (!(p->starts >> s & 1))
                continue;
            if (out != NULL && n >= *count) {
                ret = NVML_ERROR_INSUFFICIENT_SIZE;
                break;
            }
            if (out != NULL)
                out[n] = (nvmlGpuInstancePlacement_t){.start = s, .size = p->size};
            n++;
        }
        *count = n;
    }
    pthread_mutex_unlock(&mig_lock);
    return ret;
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profile, nvmlGpuInstancePlacement_t *out, unsigned int *count) {
    trace("nvmlDeviceGetGpuInstancePossiblePlacements");
    return placements(device, profile, out, count);
}
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profile, nvmlGpuInstancePlacement_t *out, unsigned int *count) {
    trace("nvmlDeviceGetGpuInstancePossiblePlacements_v2");
    return placements(device, profile, out, count);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profile, unsigned int *count) {
    trace("nvmlDeviceGetGpuInstanceRemainingCapacity");
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int g;
    const struct gi_profile *p;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(0);
    if (ret == NVML_SUCCESS)
        ret = gi_call(device, profile, &g, &p);
    if (ret == NVML_SUCCESS) {
        unsigned int compute, taken = gi_taken(g, &compute), n = 0;
        int s;
        while (gi_instances(g, profile) + n < p->count && (s = gi_fit(p, taken, compute, -1)) >= 0) {
            taken |= slots(p->size, (unsigned int)s);
            compute += p->slices;
            n++;
        }
        *count = n;
    }
    pthread_mutex_unlock(&mig_lock);
    return ret;
}

static nvmlReturn_t gi_create(nvmlDevice_t device, unsigned int profile, const nvmlGpuInstancePlacement_t *at, nvmlGpuInstance_t *out) {
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int g, id = 0;
    const struct gi_profile *p;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(1);
    if (ret != NVML_SUCCESS) {
        pthread_mutex_unlock(&mig_lock);
        return ret;
    }
    ret = gi_call(device, profile, &g, &p);
    if (ret == NVML_SUCCESS && at != NULL && (at->start >= MEMORY_SLICES || !(p->starts >> at->start & 1) || at->size != p->size))
        ret = NVML_ERROR_INVALID_ARGUMENT;
    if (ret == NVML_SUCCESS) {
        unsigned int compute, taken = gi_taken(g, &compute);
        int s = gi_fit(p, taken, compute, at != NULL ? (int)at->start : -1);
        for (id = 1; id < MAX_GI && mig.gi[g][id].used; id++) {
        }
        if (s < 0 || id >= MAX_GI || gi_instances(g, profile) >= p->count)
            ret = NVML_ERROR_INSUFFICIENT_RESOURCES;
        else
            mig.gi[g][id] = (struct mig_gi){.used = 1, .profile = profile, .start = (unsigned int)s};
    }
    nvmlReturn_t saved = mig_end(ret == NVML_SUCCESS);
    pthread_mutex_unlock(&mig_lock);
    if (ret == NVML_SUCCESS && saved == NVML_SUCCESS)
        *out = gi_handle(g, id);
    return ret == NVML_SUCCESS ? saved : ret;
}

nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profile, nvmlGpuInstance_t *gi) {
    trace("nvmlDeviceCreateGpuInstance");
    return gi_create(device, profile, NULL, gi);
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profile, const nvmlGpuInstancePlacement_t *placement, nvmlGpuInstance_t *gi) {
    trace("nvmlDeviceCreateGpuInstanceWithPlacement");
    if (placement == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    return gi_create(device, profile, placement, gi);
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t h) {
    trace("nvmlGpuInstanceDestroy");
    REQUIRE_INIT();
    unsigned int g, id;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(1);
    if (ret != NVML_SUCCESS) {
        pthread_mutex_unlock(&mig_lock);
        return ret == NVML_ERROR_NOT_SUPPORTED ? NVML_ERROR_INVALID_ARGUMENT : ret;
    }
    struct mig_gi *gi = gi_of(h, &g, &id);
    if (gi == NULL) {
        ret = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        for (unsigned int c = 0; c < MAX_CI; c++) {
            if (gi->ci[c].used)
                ret = NVML_ERROR_IN_USE;
        }
        if (ret == NVML_SUCCESS)
            memset(gi, 0, sizeof *gi);
    }
    nvmlReturn_t saved = mig_end(ret == NVML_SUCCESS);
    pthread_mutex_unlock(&mig_lock);
    return ret == NVML_SUCCESS ? saved : ret;
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profile, nvmlGpuInstance_t *out, unsigned int *count) {
    trace("nvmlDeviceGetGpuInstances");
    if (out == NULL || count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int g;
    const struct gi_profile *p;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(0);
    if (ret == NVML_SUCCESS)
        ret = gi_call(device, profile, &g, &p);
    if (ret == NVML_SUCCESS) {
        unsigned int n = 0;
        for (unsigned int id = 1; id < MAX_GI; id++) {
            if (mig.gi[g][id].used && mig.gi[g][id].profile == profile)
                out[n++] = gi_handle(g, id);
        }
        *count = n;
    }
    pthread_mutex_unlock(&mig_lock);
    return ret;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *out) {
    trace("nvmlDeviceGetGpuInstanceById");
    REQUIRE_DEVICE(device, out);
    unsigned int g = gpu(device)->index;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(0);
    if (ret == NVML_SUCCESS && (!mig.mode[g] || id == 0 || id >= MAX_GI || !mig.gi[g][id].used))
        ret = NVML_ERROR_NOT_FOUND;
    pthread_mutex_unlock(&mig_lock);
    if (ret == NVML_SUCCESS)
        *out = gi_handle(g, id);
    return ret == NVML_ERROR_NOT_SUPPORTED ? NVML_ERROR_NOT_FOUND : ret;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t h, nvmlGpuInstanceInfo_t *info) {
    trace("nvmlGpuInstanceGetInfo");
    REQUIRE_INIT();
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int g, id;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(0);
    struct mig_gi *gi = ret == NVML_SUCCESS ? gi_of(h, &g, &id) : NULL;
    const struct gi_profile *p = gi != NULL ? gi_profile(g, gi->profile) : NULL;
    if (p == NULL) {
        ret = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        info->device = handle(g);
        info->id = id;
        info->profileId = gi->profile;
        info->placement = (nvmlGpuInstancePlacement_t){.start = gi->start, .size = p->size};
    }
    pthread_mutex_unlock(&mig_lock);
    return ret;
}

/* ---- compute instances ---- */

/* The GPU instance and compute-instance profile of a call; the state is loaded. */
static nvmlReturn_t ci_call(nvmlGpuInstance_t h, unsigned int profile, unsigned int engine, unsigned int *g, unsigned int *id,
                            const struct gi_profile **gp) {
    struct mig_gi *gi = gi_of(h, g, id);
    if (gi == NULL || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT || engine >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    *gp = gi_profile(*g, gi->profile);
    return *gp != NULL && ci_count(*gp, profile) > 0 ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

static void ci_profile_info(const struct gi_profile *gp, unsigned int profile, nvmlComputeInstanceProfileInfo_t *info) {
    memset(info, 0, sizeof *info);
    info->id = profile;
    info->sliceCount = ci_slices[profile];
    info->instanceCount = ci_count(gp, profile);
    info->multiprocessorCount = ci_slices[profile] * SMS_PER_SLICE;
    info->sharedCopyEngineCount = gp->slices;
    info->sharedDecoderCount = gp->decoders;
    info->sharedJpegCount = gp->media;
    info->sharedOfaCount = gp->media;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t h, unsigned int profile, unsigned int engine,
                                                          nvmlComputeInstanceProfileInfo_t *info) {
    trace("nvmlGpuInstanceGetComputeInstanceProfileInfo");
    REQUIRE_INIT();
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int g, id;
    const struct gi_profile *gp;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(0);
    if (ret == NVML_SUCCESS)
        ret = ci_call(h, profile, engine, &g, &id, &gp);
    if (ret == NVML_SUCCESS)
        ci_profile_info(gp, profile, info);
    pthread_mutex_unlock(&mig_lock);
    return ret;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t h, unsigned int profile, unsigned int engine,
                                                           nvmlComputeInstanceProfileInfo_v2_t *info) {
    trace("nvmlGpuInstanceGetComputeInstanceProfileInfoV");
    if (info == NULL || info->version != nvmlComputeInstanceProfileInfo_v2)
        return info == NULL ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlComputeInstanceProfileInfo_t v1;
    nvmlReturn_t ret = nvmlGpuInstanceGetComputeInstanceProfileInfo(h, profile, engine, &v1);
    if (ret != NVML_SUCCESS)
        return ret;
    info->id = v1.id;
    info->sliceCount = v1.sliceCount;
    info->instanceCount = v1.instanceCount;
    info->multiprocessorCount = v1.multiprocessorCount;
    info->sharedCopyEngineCount = v1.sharedCopyEngineCount;
    info->sharedDecoderCount = v1.sharedDecoderCount;
    info->sharedEncoderCount = v1.sharedEncoderCount;
    info->sharedJpegCount = v1.sharedJpegCount;
    info->sharedOfaCount = v1.sharedOfaCount;
    snprintf(info->name, sizeof info->name, "MIG %uc", v1.sliceCount);
    return NVML_SUCCESS;
}

/* First free placement of a compute instance of c slices in gi; -1 when none. */
static int ci_fit(const struct gi_profile *gp, const struct mig_gi *gi, unsigned int c) {
    unsigned int taken = 0;
    for (unsigned int k = 0; k < MAX_CI; k++) {
        if (gi->ci[k].used)
            taken |= slots(ci_slices[gi->ci[k].profile], gi->ci[k].start);
    }
    for (unsigned int s = 0; s + c <= gp->slices; s += c) {
        if (!(taken & slots(c, s)))
            return (int)s;
    }
    return -1;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t h, unsigned int profile, unsigned int *count) {
    trace("nvmlGpuInstanceGetComputeInstanceRemainingCapacity");
    REQUIRE_INIT();
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int g, id;
    const struct gi_profile *gp;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(0);
    if (ret == NVML_SUCCESS)
        ret = ci_call(h, profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &g, &id, &gp);
    if (ret == NVML_SUCCESS) {
        struct mig_gi copy = mig.gi[g][id];
        unsigned int n = 0, k = 0;
        int s;
        for (; k < MAX_CI && (s = ci_fit(gp, &copy, ci_slices[profile])) >= 0; k++) {
            if (!copy.ci[k].used) {
                copy.ci[k] = (struct mig_ci){.used = 1, .profile = profile, .start = (unsigned int)s};
                n++;
            }
        }
        *count = n;
    }
    pthread_mutex_unlock(&mig_lock);
    return ret;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t h, unsigned int profile, nvmlComputeInstance_t *out) {
    trace("nvmlGpuInstanceCreateComputeInstance");
    REQUIRE_INIT();
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int g, id, c = 0;
    const struct gi_profile *gp;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(1);
    if (ret != NVML_SUCCESS) {
        pthread_mutex_unlock(&mig_lock);
        return ret == NVML_ERROR_NOT_SUPPORTED ? NVML_ERROR_INVALID_ARGUMENT : ret;
    }
    ret = ci_call(h, profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &g, &id, &gp);
    if (ret == NVML_SUCCESS) {
        struct mig_gi *gi = &mig.gi[g][id];
        int s = ci_fit(gp, gi, ci_slices[profile]);
        for (c = 0; c < MAX_CI && gi->ci[c].used; c++) {
        }
        if (s < 0 || c >= MAX_CI)
            ret = NVML_ERROR_INSUFFICIENT_RESOURCES;
        else
            gi->ci[c] = (struct mig_ci){.used = 1, .profile = profile, .start = (unsigned int)s};
    }
    nvmlReturn_t saved = mig_end(ret == NVML_SUCCESS);
    pthread_mutex_unlock(&mig_lock);
    if (ret == NVML_SUCCESS && saved == NVML_SUCCESS)
        *out = ci_handle(g, id, c);
    return ret == NVML_SUCCESS ? saved : ret;
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t h) {
    trace("nvmlComputeInstanceDestroy");
    REQUIRE_INIT();
    unsigned int g, id, c;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(1);
    if (ret != NVML_SUCCESS) {
        pthread_mutex_unlock(&mig_lock);
        return ret == NVML_ERROR_NOT_SUPPORTED ? NVML_ERROR_INVALID_ARGUMENT : ret;
    }
    struct mig_ci *ci = ci_of(h, &g, &id, &c);
    if (ci == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else
        memset(ci, 0, sizeof *ci);
    nvmlReturn_t saved = mig_end(ret == NVML_SUCCESS);
    pthread_mutex_unlock(&mig_lock);
    return ret == NVML_SUCCESS ? saved : ret;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t h, unsigned int profile, nvmlComputeInstance_t *out, unsigned int *count) {
    trace("nvmlGpuInstanceGetComputeInstances");
    REQUIRE_INIT();
    if (out == NULL || count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int g, id;
    const struct gi_profile *gp;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(0);
    if (ret == NVML_SUCCESS)
        ret = ci_call(h, profile, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &g, &id, &gp);
    if (ret == NVML_SUCCESS) {
        unsigned int n = 0;
        for (unsigned int c = 0; c < MAX_CI; c++) {
            if (mig.gi[g][id].ci[c].used && mig.gi[g][id].ci[c].profile == profile)
                out[n++] = ci_handle(g, id, c);
        }
        *count = n;
    }
    pthread_mutex_unlock(&mig_lock);
    return ret;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t h, unsigned int ci, nvmlComputeInstance_t *out) {
    trace("nvmlGpuInstanceGetComputeInstanceById");
    REQUIRE_INIT();
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int g, id;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(0);
    struct mig_gi *gi = ret == NVML_SUCCESS ? gi_of(h, &g, &id) : NULL;
    if (gi == NULL)
        ret = NVML_ERROR_INVALID_ARGUMENT;
    else if (ci >= MAX_CI || !gi->ci[ci].used)
        ret = NVML_ERROR_NOT_FOUND;
    pthread_mutex_unlock(&mig_lock);
    if (ret == NVML_SUCCESS)
        *out = ci_handle(g, id, ci);
    return ret;
}

static nvmlReturn_t ci_info(nvmlComputeInstance_t h, nvmlComputeInstanceInfo_t *info) {
    REQUIRE_INIT();
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int g, id, c;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(0);
    struct mig_ci *ci = ret == NVML_SUCCESS ? ci_of(h, &g, &id, &c) : NULL;
    if (ci == NULL) {
        ret = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        info->device = handle(g);
        info->gpuInstance = gi_handle(g, id);
        info->id = c;
        info->profileId = ci->profile;
        info->placement = (nvmlComputeInstancePlacement_t){.start = ci->start, .size = ci_slices[ci->profile]};
    }
    pthread_mutex_unlock(&mig_lock);
    return ret;
}

nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t h, nvmlComputeInstanceInfo_t *info) {
    trace("nvmlComputeInstanceGetInfo");
    return ci_info(h, info);
}
nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t h, nvmlComputeInstanceInfo_t *info) {
    trace("nvmlComputeInstanceGetInfo_v2");
    return ci_info(h, info);
}

/* ---- MIG devices: one per compute instance ---- */

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMig) {
    trace("nvmlDeviceIsMigDeviceHandle");
    REQUIRE_DEVICE(device, isMig);
    *isMig = (unsigned int)is_mig_handle(device);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *n) {
    trace("nvmlDeviceGetMaxMigDeviceCount");
    REQUIRE_DEVICE(device, n);
    *n = cfg.arch >= NVML_DEVICE_ARCH_AMPERE ? 7 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *out) {
    trace("nvmlDeviceGetMigDeviceHandleByIndex");
    REQUIRE_DEVICE(device, out);
    if (is_mig_handle(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int g = gpu(device)->index, n = 0;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(0) == NVML_ERROR_UNKNOWN ? NVML_ERROR_UNKNOWN : NVML_ERROR_NOT_FOUND;
    for (unsigned int id = 1; id < MAX_GI && mig.mode[g]; id++) {
        for (unsigned int c = 0; c < MAX_CI; c++) {
            if (mig.gi[g][id].used && mig.gi[g][id].ci[c].used && n++ == index) {
                *out = mig_handle(g, id, c);
                ret = NVML_SUCCESS;
            }
        }
    }
    pthread_mutex_unlock(&mig_lock);
    return ret;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t device, nvmlDevice_t *out) {
    trace("nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct mig_view v;
    nvmlReturn_t ret = mig_view(device, &v);
    if (ret == NVML_SUCCESS)
        *out = handle(v.gpu);
    return ret;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    trace("nvmlDeviceGetGpuInstanceId");
    if (id == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct mig_view v;
    nvmlReturn_t ret = mig_view(device, &v);
    if (ret == NVML_SUCCESS)
        *id = v.gi;
    return ret;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    trace("nvmlDeviceGetComputeInstanceId");
    if (id == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct mig_view v;
    nvmlReturn_t ret = mig_view(device, &v);
    if (ret == NVML_SUCCESS)
        *id = v.ci;
    return ret;
}

static nvmlReturn_t attributes(nvmlDevice_t device, nvmlDeviceAttributes_t *a) {
    if (a == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct mig_view v;
    nvmlReturn_t ret = mig_view(device, &v);
    if (ret != NVML_SUCCESS)
        return ret == NVML_ERROR_INVALID_ARGUMENT && valid(device) == NVML_SUCCESS ? NVML_ERROR_NOT_SUPPORTED : ret;
    memset(a, 0, sizeof *a);
    a->multiprocessorCount = v.ci_slices * SMS_PER_SLICE;
    a->sharedCopyEngineCount = v.profile->slices;
    a->sharedDecoderCount = v.profile->decoders;
    a->sharedJpegCount = v.profile->media;
    a->sharedOfaCount = v.profile->media;
    a->gpuInstanceSliceCount = v.profile->slices;
    a->computeInstanceSliceCount = v.ci_slices;
    a->memorySizeMB = v.profile->memory_mb;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *a) {
    trace("nvmlDeviceGetAttributes");
    return attributes(device, a);
}
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *a) {
    trace("nvmlDeviceGetAttributes_v2");
    return attributes(device, a);
}

/* The MIG device with this UUID (found = 1), or none. */
static nvmlReturn_t mig_by_uuid(const char *uuid, nvmlDevice_t *out, int *found) {
    *found = 0;
    if (strncmp(uuid, "MIG-", 4) != 0)
        return NVML_SUCCESS;
    pthread_mutex_lock(&mig_lock);
    nvmlReturn_t ret = mig_begin(0);
    for (unsigned int g = 0; ret == NVML_SUCCESS && g < cfg.count; g++) {
        for (unsigned int id = 1; id < MAX_GI; id++) {
            for (unsigned int c = 0; c < MAX_CI; c++) {
                char u[NVML_DEVICE_UUID_BUFFER_SIZE];
                if (!mig.gi[g][id].used || !mig.gi[g][id].ci[c].used)
                    continue;
                mig_uuid(g, id, c, u, sizeof u);
                if (strcmp(u, uuid) == 0) {
                    *out = mig_handle(g, id, c);
                    *found = 1;
                }
            }
        }
    }
    pthread_mutex_unlock(&mig_lock);
    return ret == NVML_ERROR_NOT_SUPPORTED ? NVML_SUCCESS : ret;
}

/* A MIG device's UUID (what 0) or name (what 1), for nvmlDeviceGetUUID and nvmlDeviceGetName. */
static nvmlReturn_t mig_string(nvmlDevice_t device, int what, char *out, unsigned int length) {
    struct mig_view v;
    nvmlReturn_t ret = mig_view(device, &v);
    if (ret != NVML_SUCCESS)
        return ret;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE + 32];
    mig_name(&v, name, sizeof name);
    return put_string(out, length, what == 0 ? v.uuid : name);
}

static nvmlReturn_t mig_memory_mib(nvmlDevice_t device, unsigned long long *mib) {
    struct mig_view v;
    nvmlReturn_t ret = mig_view(device, &v);
    if (ret == NVML_SUCCESS)
        *mib = v.profile->memory_mb;
    return ret;
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
