package simd

import (
	"net"
	"syscall"
)

// Peer is what the kernel says about the process at the other end of a unix socket
// connection (SO_PEERCRED): the process that called connect(), with its pid and uid
// translated into this process's pid and user namespaces. For a process in a container
// that is its host pid, as a real driver sees it; what the process says about itself
// (getpid() inside its container) is not.
type Peer struct {
	PID int // 0 when the peer's process is not visible in our pid namespace
	UID int
	GID int
}

// PeerOf returns the kernel's credentials of c's peer; false when c is not a unix
// socket or the kernel does not tell.
func PeerOf(c net.Conn) (Peer, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, false
	}
	var cred *syscall.Ucred
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		cred, gerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || gerr != nil || cred == nil {
		return Peer{}, false
	}
	return Peer{PID: int(cred.Pid), UID: int(cred.Uid), GID: int(cred.Gid)}, true
}

// identity picks the pid and uid gpusimd files a process under: the peer credential's,
// falling back to what the process claimed only where the kernel could not tell (a peer
// in a pid namespace gpusimd cannot see has pid 0).
func identity(peer Peer, known bool, claimedPID, claimedUID int) (pid, uid int) {
	pid, uid = claimedPID, claimedUID
	if known {
		uid = peer.UID
		if peer.PID > 0 {
			pid = peer.PID
		}
	}
	return pid, uid
}
