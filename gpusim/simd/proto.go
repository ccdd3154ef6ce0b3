package simd

// Mirror of gpusim/driver/gsproto.h; the sizes are checked by a test that
// compiles the header.

const (
	magic           = "GSIMBIN1"
	protoVersion    = 1
	maxMsg          = 64 << 20
	hdrSize         = 16
	replySize       = 24
	DefaultSocket   = "/tmp/gpusim/gpusimd.sock"
	opHello         = 1
	opDevInfo       = 2
	opCtxCreate     = 3
	opCtxDestroy    = 4
	opStreamCreate  = 5
	opStreamDestroy = 6
)

const (
	opModuleLoad      = 7
	opModuleUnload    = 8
	opFuncGet         = 9
	opLaunch          = 10
	opCopy            = 11
	opEventCreate     = 12
	opEventDestroy    = 13
	opEventRecord     = 14
	opStreamWaitEvent = 15
	opSync            = 16
	opQuery           = 17
	opEventElapsed    = 18
	opMemAlloc        = 19
	opMemFree         = 20
	opMemInfo         = 21
	opGreenCtxCreate  = 22
	opReply           = 0x8000
	opNotify          = 0x8001
	opEventDone       = 0x8002
	eventDoneSize     = hdrSize + 24
)

// payload sizes after the header, for validation
var payloadSize = map[uint16]int{
	opHello:           16,
	opDevInfo:         8,
	opCtxCreate:       40,
	opCtxDestroy:      8,
	opStreamCreate:    8,
	opStreamDestroy:   8,
	opModuleLoad:      8, // + image
	opModuleUnload:    8,
	opFuncGet:         16, // + name
	opLaunch:          32,
	opCopy:            16,
	opEventCreate:     8,
	opEventDestroy:    8,
	opEventRecord:     8,
	opStreamWaitEvent: 8,
	opSync:            8,
	opQuery:           8,
	opEventElapsed:    8,
	opMemAlloc:        16,
	opMemFree:         8,
	opMemInfo:         8,
	opGreenCtxCreate:  16,
}
