package daemon

import (
	"context"
	"fmt"
	"net"
	"slices"
	"syscall"
)

type credKey struct{}

// peerCred is the identity of the process at the other end of an API connection,
// as the kernel reports it (SO_PEERCRED): it cannot be forged by the client.
type peerCred struct {
	uid, pid int
	err      error
}

// connContext stores each connection's peer credentials in its requests' context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return context.WithValue(ctx, credKey{}, peerCred{err: fmt.Errorf("not a unix socket connection")})
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return context.WithValue(ctx, credKey{}, peerCred{err: err})
	}
	var cred *syscall.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		serr = err
	}
	if serr != nil {
		return context.WithValue(ctx, credKey{}, peerCred{err: serr})
	}
	return context.WithValue(ctx, credKey{}, peerCred{uid: int(cred.Uid), pid: int(cred.Pid)})
}

// authorize allows root and the policy's extra uids.
func authorize(ctx context.Context, allow []int) error {
	uid, err := peerUID(ctx)
	if err != nil || uid == 0 || slices.Contains(allow, uid) {
		return err
	}
	return fmt.Errorf("uid %d may not use the muxd API (allowed: root and node.allow_uids)", uid)
}

// authorizeRoot allows root only, whatever node.allow_uids says.
func authorizeRoot(ctx context.Context, what string) error {
	uid, err := peerUID(ctx)
	if err != nil || uid == 0 {
		return err
	}
	return fmt.Errorf("uid %d may not use %s (root only)", uid, what)
}

func peerUID(ctx context.Context) (int, error) {
	pc, ok := ctx.Value(credKey{}).(peerCred)
	if !ok {
		return 0, fmt.Errorf("peer credentials unavailable")
	}
	if pc.err != nil {
		return 0, fmt.Errorf("peer credentials unavailable: %v", pc.err)
	}
	return pc.uid, nil
}

// peerPID is the pid of the process at the other end of the request's connection, as
// muxd sees it; 0 when unknown (or not in muxd's pid namespace).
func peerPID(ctx context.Context) int {
	pc, ok := ctx.Value(credKey{}).(peerCred)
	if !ok || pc.err != nil {
		return 0
	}
	return pc.pid
}
