#pragma once
// Structured tangents (see StructTangent in graph.hpp): the dense form, and how views and
// sums map a structured tangent to their output's. Elementwise graphs map theirs in
// record_graph (record.hpp), one term at a time.
#include "../core/config.hpp"
#include <numeric>

namespace reel::inline REEL_ABI::detail {

GradPtr apply_view(const GradPtr& t, const ViewSpec& v, const GradType* type);
GradPtr view_with(const TensorImpl& t, Geometry g);

// Up to this many terms a structured tangent stays structured; beyond, it is made dense (one
// term with every component free).
inline constexpr size_t kMaxTangentTerms = 6;

// A structured pass (functional::hessian) gives itself a budget: densify throws this when a
// tangent would have more elements, and the caller starts over in chunks of directions.
struct StructBudgetExceeded {};
REEL_INLINE int64_t& struct_budget();

REEL_INLINE int free_count(const TanTerm& t);
REEL_INLINE GradPtr reshaped(const GradPtr& t, Shape s, const GradType* type);

// Each term written into its diagonal of one zero tensor [comps..., *sizes]: the dims of
// aligned components fold into the dims they equal (their strides add).
REEL_INLINE GradPtr densify(const StructTangent& s);

// A dense tangent [batch, *sizes] as one term with every component free.
REEL_INLINE StructTangent as_struct(const GradPtr& dense, const Shape& comps, const Shape& sizes, const GradType* type);

// Adds a term (to the one of the same pattern, when there is one).
REEL_INLINE void add_term(StructTangent& s, TanTerm t);
REEL_INLINE StructPtr finish_struct(StructTangent s);

// Where structure is kept: a plain-value level (no history), and no other level live.
REEL_INLINE bool structure_ok(uint64_t level);

// A view's structured tangent; null where the view mixes an aligned dim with others (the
// tangent is then made dense). Reshapes that add or drop dims of size 1, expands and
// permutes keep the structure.
REEL_INLINE StructPtr view_struct(const StructTangent& s, const ViewSpec& v, const Shape& out);

// A sum over `dims` (empty: all) of a structured tangent, times `scale`. An aligned dim
// summed over picks the one element where it equals its component: the component becomes
// free and the dim becomes its coefficient dim. Other dims are summed.
REEL_INLINE StructPtr sum_struct(const StructTangent& s, Shape dims, bool keepdim, double scale, const Shape& out);

}  // namespace reel::detail

#ifndef REEL_COMPILED_LIB
#include "structured-inl.hpp"
#endif
