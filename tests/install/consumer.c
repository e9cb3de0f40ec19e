#include <ringrun/ringrun.h>
#include <stdio.h>
int main(void) {
  if (ringrun_init() != 0) { fprintf(stderr, "%s\n", ringrun_last_error()); return 1; }
  float x = (float)(ringrun_rank() + 1), y = 0;
  ringrun_allreduce(&x, &y, 1, RINGRUN_FLOAT32, RINGRUN_SUM);
  printf("rank %d of %d: sum %g\n", ringrun_rank(), ringrun_size(), y);
  return ringrun_finalize();
}
