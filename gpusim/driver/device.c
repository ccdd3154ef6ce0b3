/* device.c — cuInit, versions, device queries and error strings. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

GS_EXPORT CUresult cuInit(unsigned int flags)
{
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	return gs_init();
}

GS_EXPORT CUresult cuDriverGetVersion(int *v)
{
	if (v == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*v = GS_DRIVER_VERSION;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGetCount(int *count)
{
	if (count == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	*count = gs_ndev;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ordinal < 0 || ordinal >= gs_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

CUresult gs_dev_ok(CUdevice dev)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= gs_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	if (name == NULL || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gs_dev_ok(dev);
	if (r != CUDA_SUCCESS)
		return r;
	snprintf(name, (size_t)len, "%s", gs_devs[dev].info.name);
	return CUDA_SUCCESS;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

GS_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	if (uuid == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gs_dev_ok(dev);
	if (r != CUDA_SUCCESS)
		return r;
	/* "GPU-xxxxxxxx-xxxx-..." -> 16 bytes */
	const char *s = gs_devs[dev].info.uuid;
	if (strncmp(s, "GPU-", 4) == 0)
		s += 4;
	int n = 0;
	for (; *s != '\0' && n < 32; s++) {
		int v = hexval(*s);
		if (v < 0)
			continue;
		if (n % 2 == 0)
			uuid->bytes[n / 2] = (char)(v << 4);
		else
			uuid->bytes[n / 2] = (char)(uuid->bytes[n / 2] | v);
		n++;
	}
	return n == 32 ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

GS_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid(uuid, dev); }

GS_EXPORT CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
	if (bytes == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gs_dev_ok(dev);
	if (r != CUDA_SUCCESS)
		return r;
	*bytes = gs_devs[dev].info.total_mem;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute a, CUdevice dev)
{
	if (pi == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gs_dev_ok(dev);
	if (r != CUDA_SUCCESS)
		return r;
	const struct gs_dev_info_reply *d = &gs_devs[dev].info;
	int v;
	switch (a) {
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
	case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: v = 65536; break;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
	case CU_DEVICE_ATTRIBUTE_MAX_PITCH: v = 2147483647; break;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = 65536; break;
	case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = (int)d->max_clock_khz; break;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: v = 512; break;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = (int)d->sms; break;
	case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT:
	case CU_DEVICE_ATTRIBUTE_INTEGRATED:
	case CU_DEVICE_ATTRIBUTE_TCC_DRIVER:
	case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD:
	case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
	case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: v = 0; break;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: v = (int)d->pci_bus; break;
	case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
	case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: v = dev; break;
	case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = (int)d->mem_clock_khz; break;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = (int)d->bus_width; break;
	case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = (int)d->l2_bytes; break;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = (int)d->max_threads_per_sm; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = (int)d->max_blocks_per_sm; break;
	case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: v = 2; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = (int)d->cc_major; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = (int)d->cc_minor; break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
		v = d->cc_major >= 9 ? 233472 : d->cc_major == 8 ? 167936 : 65536;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
		v = d->cc_major >= 9 ? 232448 : d->cc_major == 8 ? 166912 : 65536;
		break;
	case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: v = d->cc_major == 7 ? 32 : 2; break;
	case CU_DEVICE_ATTRIBUTE_MPS_ENABLED: v = gs_mps_server_pid > 0; break;
	case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
	case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
	case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
	case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
	case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: v = 1; break;
	case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: v = d->cc_major >= 9; break;
	case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
	case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH:
	case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: v = 0; break;
	default:
		if ((int)a <= 0 || (int)a > 200)
			return CUDA_ERROR_INVALID_VALUE;
		v = 0; /* attributes this simulator does not model read as 0 */
	}
	*pi = v;
	return CUDA_SUCCESS;
}

struct errname {
	CUresult code;
	const char *name;
	const char *text;
};

static const struct errname errnames[] = {
	{CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
	{CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
	{CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
	{CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	{CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	{CUDA_ERROR_ECC_UNCORRECTABLE, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
	{CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", "the provided execution affinity is not supported"},
	{CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
	{CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	{CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	{CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
	{CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	{CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
	{CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
	{CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	{CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"},
	{CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
	{CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	{CUDA_ERROR_MPS_CONNECTION_FAILED, "CUDA_ERROR_MPS_CONNECTION_FAILED", "MPS client failed to connect to the MPS control daemon or the MPS server"},
	{CUDA_ERROR_MPS_RPC_FAILURE, "CUDA_ERROR_MPS_RPC_FAILURE", "the remote procedural call between the MPS server and the MPS client failed"},
	{CUDA_ERROR_MPS_SERVER_NOT_READY, "CUDA_ERROR_MPS_SERVER_NOT_READY", "MPS server is not ready to accept new MPS client requests"},
	{CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", "the hardware resources required to create MPS client have been exhausted"},
	{CUDA_ERROR_MPS_CLIENT_TERMINATED, "CUDA_ERROR_MPS_CLIENT_TERMINATED", "the MPS client has been terminated by the server"},
	{CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
	{CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
	{CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
	{CUDA_ERROR_TIMEOUT, "CUDA_ERROR_TIMEOUT", "wait operation timed out"},
	{CUDA_ERROR_INVALID_RESOURCE_TYPE, "CUDA_ERROR_INVALID_RESOURCE_TYPE", "invalid resource type"},
	{CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", "invalid resource configuration"},
	{CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static const struct errname *find_err(CUresult e)
{
	for (size_t i = 0; i < sizeof errnames / sizeof errnames[0]; i++)
		if (errnames[i].code == e)
			return &errnames[i];
	return NULL;
}

GS_EXPORT CUresult cuGetErrorString(CUresult e, const char **s)
{
	if (s == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	const struct errname *n = find_err(e);
	if (n == NULL) {
		*s = NULL;
		return CUDA_ERROR_INVALID_VALUE;
	}
	*s = n->text;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGetErrorName(CUresult e, const char **s)
{
	if (s == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	const struct errname *n = find_err(e);
	if (n == NULL) {
		*s = NULL;
		return CUDA_ERROR_INVALID_VALUE;
	}
	*s = n->name;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
	/* private tables of the real driver: not simulated */
	if (table == NULL || id == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*table = NULL;
	return CUDA_ERROR_NOT_SUPPORTED;
}
