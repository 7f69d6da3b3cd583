#pragma once
// Functions that device code calls too (op bodies, element conversion) are marked REEL_HD.
#if defined(__CUDACC__)
#define REEL_HD __host__ __device__
#else
#define REEL_HD
#endif
