package sim

// Result is a CUDA driver API result code (CUresult). The values are NVIDIA's,
// so they travel unchanged through the wire protocol to the fake libcuda.
type Result int32

// The CUresult values the simulator produces.
const (
	Success                Result = 0
	ErrInvalidValue        Result = 1
	ErrOutOfMemory         Result = 2
	ErrDeviceUnavailable   Result = 46
	ErrInvalidDevice       Result = 101
	ErrInvalidImage        Result = 200
	ErrInvalidContext      Result = 201
	ErrInvalidHandle       Result = 400
	ErrNotFound            Result = 500
	ErrNotReady            Result = 600
	ErrIllegalAddress      Result = 700
	ErrLaunchFailed        Result = 719
	ErrECCUncorrectable    Result = 214
	ErrNotSupported        Result = 801
	ErrMPSConnectionFailed Result = 805
	ErrMPSRPCFailure       Result = 806
	ErrMPSServerNotReady   Result = 807
	ErrMPSClientTerminated Result = 810
	ErrUnknown             Result = 999
)

// Error makes a Result usable as a Go error.
func (r Result) Error() string {
	switch r {
	case Success:
		return "CUDA_SUCCESS"
	case ErrInvalidValue:
		return "CUDA_ERROR_INVALID_VALUE"
	case ErrOutOfMemory:
		return "CUDA_ERROR_OUT_OF_MEMORY"
	case ErrDeviceUnavailable:
		return "CUDA_ERROR_DEVICE_UNAVAILABLE"
	case ErrInvalidDevice:
		return "CUDA_ERROR_INVALID_DEVICE"
	case ErrInvalidImage:
		return "CUDA_ERROR_INVALID_IMAGE"
	case ErrInvalidContext:
		return "CUDA_ERROR_INVALID_CONTEXT"
	case ErrInvalidHandle:
		return "CUDA_ERROR_INVALID_HANDLE"
	case ErrNotFound:
		return "CUDA_ERROR_NOT_FOUND"
	case ErrNotReady:
		return "CUDA_ERROR_NOT_READY"
	case ErrIllegalAddress:
		return "CUDA_ERROR_ILLEGAL_ADDRESS"
	case ErrLaunchFailed:
		return "CUDA_ERROR_LAUNCH_FAILED"
	case ErrECCUncorrectable:
		return "CUDA_ERROR_ECC_UNCORRECTABLE"
	case ErrNotSupported:
		return "CUDA_ERROR_NOT_SUPPORTED"
	case ErrMPSConnectionFailed:
		return "CUDA_ERROR_MPS_CONNECTION_FAILED"
	case ErrMPSRPCFailure:
		return "CUDA_ERROR_MPS_RPC_FAILURE"
	case ErrMPSServerNotReady:
		return "CUDA_ERROR_MPS_SERVER_NOT_READY"
	case ErrMPSClientTerminated:
		return "CUDA_ERROR_MPS_CLIENT_TERMINATED"
	}
	return "CUDA_ERROR_UNKNOWN"
}
