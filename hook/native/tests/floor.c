/* floor.c: a program that does nothing but exec the runtime named by
 * MUXBENCH_RUNTIME, linked like muxflow-runtime: the cost of one more
 * exec on the way, which no front stage can go below. */
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *rt = getenv("MUXBENCH_RUNTIME");
	(void)argc;
	if (!rt)
		return 2;
	argv[0] = "runc";
	execv(rt, argv);
	return 1;
}
