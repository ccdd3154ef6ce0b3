/* pause.c: the pod sandbox's process (kubelet's "pause" image), built statically for the
 * Kubernetes end-to-end test, which has no registry to pull the real one from. It sleeps
 * until told to stop and reaps orphans, as registry.k8s.io/pause does. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig)
{
	(void)sig;
	_exit(0);
}

static void reap(int sig)
{
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(void)
{
	signal(SIGINT, stop);
	signal(SIGTERM, stop);
	signal(SIGCHLD, reap);
	for (;;)
		pause();
}
