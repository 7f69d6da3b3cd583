#pragma once
// reel: everything that runs on the CPU.
#include "errors.hpp"
#include "tensor.hpp"
#include "factories.hpp"
#include "reductions.hpp"
#include "products.hpp"
#include "any_tensor.hpp"
#include "eigen_interop.hpp"
#include "asarray.hpp"
#include "nn/functional.hpp"
#include "autograd.hpp"
#include "autograd_functional.hpp"
#include "gradcheck.hpp"
