/* The per-thread record of the last failure, read through aotk_last_error(). */
#ifndef AOTK_ERROR_H
#define AOTK_ERROR_H

#include "aotk.h"

#if defined(__GNUC__)
#define AOTK__PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define AOTK__PRINTF(fmt, args)
#endif

/* Records the message (printf-style) and returns `status`, so failures read `return aotk__fail(...)`. */
aotk_status aotk__fail(aotk_status status, const char *format, ...) AOTK__PRINTF(2, 3);
/* Clears the message and the CUresult at the start of each public call. */
void aotk__clear_error(void);
void aotk__set_cuda_result(int result);

#endif /* AOTK_ERROR_H */
