/* trivial.c: the smallest program, the baseline of the start-up bench and
 * the stand-in runtime there: it only exits. */
int main(void)
{
	return 0;
}
