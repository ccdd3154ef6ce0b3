package sim

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// alarm calls fire when the model's next event is due.
//
// A Go timer is not precise enough for that: a process with nothing else to do waits
// for its timers in the network poller, whose epoll_wait takes whole milliseconds, so
// a timer due in 300 µs fires after about 1 ms. A kernel that ended then completed up
// to a millisecond late for every process synchronising on it: a launch-and-synchronise
// loop of 500 µs kernels turned around in ~0.95 ms here, where a real driver takes
// microseconds. A timerfd read through the same poller wakes it when due (hrtimer
// precision), and fire runs on the goroutine that read it, not after one more
// hand-off. Where no timerfd can be made, a Go timer is the fallback.
type alarm struct {
	fire  func(*alarm)
	fd    int
	f     *os.File
	timer *time.Timer // the fallback
}

// newAlarm makes a disarmed alarm that calls fire(itself) at each expiry.
func newAlarm(fire func(*alarm)) *alarm {
	a := &alarm{fire: fire, fd: -1}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		a.timer = time.AfterFunc(time.Hour, func() { fire(a) })
		a.timer.Stop()
		return a
	}
	a.fd, a.f = fd, os.NewFile(uintptr(fd), "gpusim-alarm")
	go a.read()
	return a
}

// read calls fire at each expiry until the alarm is closed.
func (a *alarm) read() {
	var buf [8]byte
	for {
		if _, err := a.f.Read(buf[:]); err != nil {
			return
		}
		a.fire(a)
	}
}

// set arms the alarm to fire after d (at once for d <= 0), replacing any earlier
// setting. Callers serialise set and stop (the simulator's lock).
func (a *alarm) set(d time.Duration) {
	if d <= 0 {
		d = 1 // a zero it_value disarms a timerfd
	}
	if a.timer != nil {
		a.timer.Reset(d)
		return
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(a.fd, 0, &spec, nil); err != nil {
		go a.fire(a) // cannot arm: look again at once rather than never
	}
}

// stop disarms the alarm.
func (a *alarm) stop() {
	if a.timer != nil {
		a.timer.Stop()
		return
	}
	unix.TimerfdSettime(a.fd, 0, &unix.ItimerSpec{}, nil)
}

// close disarms the alarm for good; a fire already running finishes.
func (a *alarm) close() {
	if a.f != nil {
		a.f.Close()
	}
	if a.timer != nil {
		a.timer.Stop()
	}
}
