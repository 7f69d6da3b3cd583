// doctest's main for the CUDA test executable (compiled by the host compiler).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
