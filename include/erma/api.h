/*
 * erma/api.h - what every public erma header opens and closes with: C
 * linkage for C++ programs, and default visibility for the declarations in
 * between (erma's own sources compile with hidden visibility, so only the
 * API that these headers declare is exported from liberma.so).
 *
 * It also holds the one limit that layers above and below the endpoint
 * share: ERMA_MAX_PATHS, the most virtual paths (ports) an endpoint sends
 * from (erma_endpoint_cfg.paths), which the congestion control's path
 * state is sized for.
 *
 * Included by the other headers; an application has no need to include it.
 */
#ifndef ERMA_API_H
#define ERMA_API_H

#ifdef __cplusplus
#define ERMA_BEGIN_DECLS extern "C" { _Pragma("GCC visibility push(default)")
#define ERMA_END_DECLS _Pragma("GCC visibility pop") }
#else
#define ERMA_BEGIN_DECLS _Pragma("GCC visibility push(default)")
#define ERMA_END_DECLS _Pragma("GCC visibility pop")
#endif

#define ERMA_MAX_PATHS 8

#endif
