// Package xcudatest holds the acceptance tests of libxcuda: real processes
// run under LD_PRELOAD=libxcuda.so against a CUDA driver stand-in (the
// project's stub driver, or gpusim's fake libcuda when it is built) while
// the tests drive the control block the way muxd does.
package xcudatest
