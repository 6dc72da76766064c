#ifndef CPTHREAD_SHIM_H
#define CPTHREAD_SHIM_H
/* glibc's pthread_cond_clockwait (2.30; a GNU extension, which the Glibc module leaves out): a timed wait on the
 * clock it is given. ConditionLock waits against CLOCK_MONOTONIC with it rather than with a condition variable
 * set to that clock and pthread_cond_timedwait, which libfaketime (the field tests' wrong wall clock) intercepts and
 * returns from at once, so that every timed wait spun. */
#include <pthread.h>
#include <time.h>
extern int pthread_cond_clockwait(pthread_cond_t *__restrict cond, pthread_mutex_t *__restrict mutex,
                                  clockid_t clock_id, const struct timespec *__restrict abstime);
#endif
